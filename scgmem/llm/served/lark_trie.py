"""A schema trie compiled into an llguidance Lark grammar over token ids, factored as the trie.

One grammar states one key of the list (the client asks for a list key by key, so that a
distinct list can drop the keys it already wrote): a path of the trie from the root to a node
where a key ends, then the separator (`terminator`) or the list's end id, or only the end id for
the list's last key (`KeyConstraint.max_keys`). Which tokens each node allows is the key-list
rule's answer (`scgmem.llm.key_rule.KeyRule.allowed`), compiled here, not restated. Terminals are token ids (`<[8363]>`, sets
`<[5,9-12]>`, llguidance's syntax documentation, "Special tokens"), never text, so the engine cannot
spell a key with another tokenisation than the local trie's.

Factored, not flat: one rule per trie node that branches, and the children that end a key right
after one token share one token-set terminal. A flat alternation of thousands of keys is what
makes grammar compilers slow or wrong (llama.cpp's GBNF at 5,000 keys, xgrammar#618,
llguidance#84); the trie's shape keeps every rule as wide as one node's fan-out.

Example::

    grammar = key_grammar(KeyRule(trie, terminator=28, eos_ids=[2]))
    LLMatcher.grammar_from_lark(grammar)
"""
from __future__ import annotations

from collections import deque
from typing import Iterable

from scgmem.llm.key_rule import KeyRule, RowState

HEADER = "%llguidance {}\n"  # llama.cpp reads a grammar starting so as llguidance Lark (not GBNF)


def token_set(ids: Iterable[int]) -> str:
    """`<[1,4-7]>`: a terminal matching any of `ids` (runs written as ranges)."""
    ids = sorted(set(ids))
    parts, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            a, b = ids[start], ids[i - 1]
            parts.append(str(a) if a == b else f"{a}-{b}")
            start = i
    return "<[" + ",".join(parts) + "]>"


def key_grammar(rule: KeyRule, state: RowState | None = None) -> str:
    """The Lark grammar of the next key of a list that stands at `state` (at the trie's root:
    `state.n_keys` keys written, `state.used` their nodes; None: the list's first key), see the
    module docstring.

    Raises:
        ValueError: no key is left to write.
    """
    trie, terminator = rule.trie, rule.terminator
    state = state or RowState(trie.ROOT)
    if state.node != trie.ROOT:
        raise ValueError(f"a key grammar starts at the trie's root, not at node {state.node}")
    ending = None  # the tokens that end a key: the same wherever one may end (the rule's)

    def key_ends(allowed: set[int]) -> list[int]:
        return ([terminator] if terminator in allowed else []) + [e for e in rule.eos_ids if e in allowed]

    lines = [f"start: n{trie.ROOT}"]
    queue = deque([trie.ROOT])
    while queue:
        node = queue.popleft()
        allowed = set(rule.allowed(RowState(node, state.n_keys, used=state.used)))
        alternatives, one_token_keys = [], []
        for token, child in trie.edges(node):
            if token == terminator:  # a key may end here, unless the rule spent it
                ends = key_ends(allowed)
                if ends:
                    ending = ending or ends
                    alternatives.append("ending")
                continue
            if token not in allowed:
                continue  # every key below it is in the list
            edges = list(trie.edges(child))
            if len(edges) == 1 and edges[0][0] == terminator:  # a key ends right after this token
                one_token_keys.append(token)
                ending = ending or key_ends(set(rule.allowed(RowState(child, state.n_keys, used=state.used))))
                continue
            alternatives.append(f"<[{token}]> n{child}")
            queue.append(child)
        if one_token_keys:
            alternatives.append(f"{token_set(one_token_keys)} ending")
        if not alternatives:
            if node == trie.ROOT:
                raise ValueError("no key is left to write: every key of the trie is in the list")
            raise ValueError(f"trie node {node} allows no token: a key without the terminator {terminator}")
        lines.append(f"n{node}: " + " | ".join(alternatives))
    lines.insert(1, "ending: " + " | ".join(f"<[{t}]>" for t in ending))
    return "\n".join(lines) + "\n"
