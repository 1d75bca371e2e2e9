"""A schema trie compiled into an llguidance Lark grammar over token ids, factored as the trie.

One grammar states one key of the list (the client asks for a list key by key, so that a
distinct list can drop the keys it already wrote): a path of the trie from the root to a node
where a key ends, then the separator (`terminator`) or the list's end id, or only the end id for
the list's last key (`KeyConstraint.max_keys`). Terminals are token ids (`<[8363]>`, sets
`<[5,9-12]>`, llguidance's syntax documentation, "Special tokens"), never text, so the engine cannot
spell a key with another tokenisation than the local trie's.

Factored, not flat: one rule per trie node that branches, and the children that end a key right
after one token share one token-set terminal. A flat alternation of thousands of keys is what
makes grammar compilers slow or wrong (llama.cpp's GBNF at 5,000 keys, xgrammar#618,
llguidance#84); the trie's shape keeps every rule as wide as one node's fan-out.

Example::

    grammar = key_grammar(trie, terminator=28, end_id=2, last=False)
    LLMatcher.grammar_from_lark(grammar)
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Iterable

from scgmem.llm.constraint_spec import TrieView

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


def spent(trie: TrieView, node: int, used: Counter) -> bool:
    """Every key below `node` is already in the list (`KeyTracker.spent`)."""
    return bool(used) and trie.count(node) <= used[node]


def key_grammar(trie: TrieView, *, terminator: int, end_id: int, last: bool, used: Counter | None = None) -> str:
    """The Lark grammar of one key of the list (see the module docstring).

    Args:
        trie: the keys; each ends with a `terminator` edge.
        terminator / end_id: the separator after a key, and the id that ends the list.
        last: the key is the list's last: it ends with `end_id` only.
        used: trie nodes on the paths of the keys the list already holds (a multiset, as
            `RowState.used`), whose keys may not come again; None = none.

    Raises:
        ValueError: no key is left to write.
    """
    used = used or Counter()
    ending = f"<[{end_id}]>" if last else f"<[{terminator}]> | <[{end_id}]>"
    lines = [f"start: n{trie.ROOT}", f"ending: {ending}"]
    queue = deque([trie.ROOT])
    while queue:
        node = queue.popleft()
        alternatives, one_token_keys = [], []
        for token, child in trie.edges(node):
            if spent(trie, child, used):
                continue
            if token == terminator:
                alternatives.append("ending")
                continue
            edges = list(trie.edges(child))
            if len(edges) == 1 and edges[0][0] == terminator:  # a key ends right after this token
                one_token_keys.append(token)
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
    return "\n".join(lines) + "\n"
