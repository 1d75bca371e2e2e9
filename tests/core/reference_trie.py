"""The reference trie: nested dicts, no caching, the obviously-correct version that the tests
compare `scgmem.core.schema.TokenTrie` to (on random tries, tests/core/test_schema.py)."""
from __future__ import annotations

from typing import Iterable, Sequence


class ReferenceTrie:
    """A plain trie of token-id sequences (nested dicts)."""

    _END = None  # dict key marking "a key ends here" (token ids are ints, never None)

    def __init__(self, keys: Iterable[Sequence[int]] = ()) -> None:
        self.root: dict = {}
        self.size = 0
        for key in keys:
            self.insert(key)

    def insert(self, key: Sequence[int]) -> bool:
        """Add `key`; returns False when it was already present."""
        node = self.root
        for t in key:
            node = node.setdefault(int(t), {})
        if self._END in node:
            return False
        node[self._END] = True
        self.size += 1
        return True

    def _walk(self, prefix: Sequence[int]) -> dict | None:
        node = self.root
        for t in prefix:
            node = node.get(int(t))
            if node is None:
                return None
        return node

    def allowed(self, prefix: Sequence[int]) -> set[int]:
        """Tokens t such that prefix + [t] is a path of the trie (empty if prefix is not)."""
        node = self._walk(prefix)
        return set() if node is None else {t for t in node if t is not self._END}

    def __contains__(self, key: Sequence[int]) -> bool:
        node = self._walk(key)
        return node is not None and self._END in node

    def __len__(self) -> int:
        return self.size
