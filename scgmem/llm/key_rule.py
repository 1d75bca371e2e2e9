"""The key-list rule, once: which token may come next in a list of schema keys (paper Section 3.3).

A constrained call writes keys as " k1, k2, k3" (`KeyConstraint`). Four rules decide the next
token, for every backend:

* the end id may come only where a key may end (the trie node has a terminator edge);
* the last key (`max_keys`) ends only with the end id, never the terminator;
* in a distinct list a key already written cannot come again: a token is spent when every key
  below it is in the list (so a row is never led into a dead end);
* once every key of the trie is in a distinct list, only the end id may follow.

`KeyRule.allowed(state)` states them as a set of tokens, and `KeyRule.step(state, token)` is the
one transition of a row's `RowState`. Both backends compile this rule, neither restates it: the
local logits processor turns `allowed_set` into mask rows (`scgmem.llm.local.schema_processor`),
the served backend into llguidance grammars and client-side checks (`scgmem.llm.served.lark_trie`,
`scgmem.llm.served.keys`), and the method replays `step` to read keys back (`core.decoding`).

Torch-free and over `TrieView` alone, so any backend (and the property test against llguidance's
own acceptance, tests/llm/test_key_rule.py) can run it.

Example::

    rule = KeyRule(trie, terminator=sep, eos_ids=[eos], max_keys=3)
    state = rule.step(RowState(trie.ROOT), token, logprob=-1.2, position=0)
    rule.allowed(state)  # the tokens that may follow
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from scgmem.llm.constraint_spec import NO_NODE, KeyConstraint, TrieView

DONE = -2  # the row chose the end id (later steps only pad)
DEAD = -3  # the row left the trie: only beam search's -inf filler candidates can


@dataclass(frozen=True)
class RowState:
    """Where one generated prefix stands.

    Attributes:
        node: trie node (the root between keys), DONE or DEAD.
        n_keys: keys completed so far.
        key_start: index (in the generated tokens) where the current key starts.
        key_logprob: raw log-prob of the current key's tokens so far.
        keys: completed keys as (start, end, raw log-prob); [start, end) covers the key's
            tokens and its terminator (or the end id standing in for it).
        path: trie nodes of the current key; used: trie nodes of the completed keys' paths (a
            multiset), for distinct lists.
    """

    node: int
    n_keys: int = 0
    key_start: int = 0
    key_logprob: float = 0.0
    keys: tuple[tuple[int, int, float], ...] = ()
    path: tuple[int, ...] = ()
    used: tuple[int, ...] = ()


@dataclass(frozen=True)
class Allowed:
    """The tokens a row may take next, in the form a backend compiles cheaply: the edge tokens of
    trie node `node` (None: no node's), plus `add`, minus `drop`. Equal values allow the same
    tokens, so a backend may cache its compiled form (a mask row) by this value."""

    node: int | None
    add: tuple[int, ...] = ()
    drop: tuple[int, ...] = ()


FINISHED = Allowed(None)  # the row ended or left the trie: no token of the list may follow


class KeyRule:
    """The rule of one constrained call.

    Args:
        trie: the keys; every key ends with an edge labelled `terminator`.
        terminator: the separator token that ends a key inside the list.
        eos_ids: the ids that may end the list (SCG-Mem's calls allow one, `KeyConstraint.end_id`).
        max_keys: keys per list (None = until the end id); the last key ends with the end id.
        distinct: a list never repeats a key.
    """

    def __init__(self, trie: TrieView, *, terminator: int, eos_ids: Sequence[int], max_keys: int | None = None,
                 distinct: bool = True) -> None:
        if max_keys is not None and max_keys < 1:
            raise ValueError(f"max_keys must be >= 1 or None, got {max_keys}")
        if not eos_ids:
            raise ValueError("eos_ids must name at least one token")
        self.trie = trie
        self.terminator = int(terminator)
        self.eos_ids = tuple(sorted({int(i) for i in eos_ids}))
        self.eos_set = frozenset(self.eos_ids)
        self.max_keys = max_keys
        self.distinct = distinct

    @classmethod
    def of(cls, constraint: KeyConstraint) -> KeyRule:
        """The rule of a `KeyConstraint` (its one end id)."""
        return cls(constraint.trie, terminator=constraint.terminator, eos_ids=[constraint.end_id],
                   max_keys=constraint.max_keys, distinct=constraint.distinct)

    # ------------------------------------------------------------------ which token may come next
    def allowed_set(self, state: RowState) -> Allowed:
        """The tokens that may follow `state`, as an `Allowed` (the four rules of the module docstring)."""
        if state.node < 0:
            return FINISHED
        trie, used = self.trie, state.used
        spent: tuple[int, ...] = ()
        if used:
            if state.node == trie.ROOT and trie.count(trie.ROOT) <= state.n_keys:
                return Allowed(None, add=self.eos_ids)  # every key is in the list: it can only end
            # the children of this node every key below which the list holds (from the used
            # nodes, a handful, rather than from the node's children, up to the vocabulary)
            spent = tuple(sorted(trie.token_into(u) for u, c in Counter(used).items()
                                 if trie.parent(u) == state.node and trie.count(u) <= c))
        if trie.num_children(state.node) == 0:
            raise ValueError(f"schema trie node {state.node} allows no token: the trie holds a key without "
                             f"the terminator {self.terminator}")
        ends = trie.child(state.node, self.terminator) != NO_NODE
        drop = set(spent)
        if ends and self.is_last_key(state):
            drop.add(self.terminator)  # the last key ends with the end id only
        if self.terminator in spent:
            drop |= self.eos_set  # the end id would end the same spent key
        return Allowed(state.node, self.eos_ids if ends else (), tuple(sorted(drop)))  # a key may end here

    def tokens(self, allowed: Allowed) -> list[int]:
        """The tokens of an `Allowed`, sorted."""
        out = {t for t, _ in self.trie.edges(allowed.node)} if allowed.node is not None else set()
        return sorted((out | set(allowed.add)) - set(allowed.drop))

    def allowed(self, state: RowState) -> list[int]:
        """The tokens that may follow `state`, sorted (empty once the row ended)."""
        return self.tokens(self.allowed_set(state))

    # ------------------------------------------------------------------ the transition
    def step(self, parent: RowState, token: int, logprob: float = 0.0, position: int = 0) -> RowState:
        """The state after `token` (generated at index `position`, raw log-prob `logprob`).

        A token the rule does not allow leads to DEAD (beam search's -inf fillers can take one);
        the end id right after a separator ends the list (DONE) without a key."""
        if parent.node < 0:
            return parent
        lp = parent.key_logprob + logprob
        dead = RowState(DEAD, parent.n_keys, keys=parent.keys)
        if token in self.eos_set:
            leaf = self.trie.child(parent.node, self.terminator)
            if leaf == NO_NODE:
                return RowState(DONE, parent.n_keys, keys=parent.keys) if parent.node == self.trie.ROOT else dead
            if self.spent(leaf, parent.used):
                return dead
            key = (parent.key_start, position + 1, lp)  # the end id stands in for the terminator
            return RowState(DONE, parent.n_keys + 1, keys=parent.keys + (key,))
        child = self.trie.child(parent.node, token)
        if child == NO_NODE or self.spent(child, parent.used):
            return dead
        if token == self.terminator:
            if self.is_last_key(parent):
                return dead  # the last key must end with the end id
            key = (parent.key_start, position + 1, lp)
            used = parent.used + parent.path + (child,) if self.distinct else ()
            return RowState(self.trie.ROOT, parent.n_keys + 1, position + 1, 0.0, parent.keys + (key,), (), used)
        return RowState(child, parent.n_keys, parent.key_start, lp, parent.keys, parent.path + (child,), parent.used)

    def spent(self, node: int, used: tuple[int, ...]) -> bool:
        """Whether every key below `node` is already in the list (distinct lists)."""
        return bool(used) and self.trie.count(node) <= used.count(node)

    def is_last_key(self, state: RowState) -> bool:
        """Whether the key being written is the list's last (it must end with the end id)."""
        return self.max_keys is not None and state.n_keys + 1 >= self.max_keys
