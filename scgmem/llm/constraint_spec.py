"""What a constrained call may generate, stated as data: `KeyConstraint`.

SCG-Mem asks the model for lists of schema keys (paper Section 3.3): " k1, k2, k3" where each
key is a path of the schema's token trie, keys are separated by the trie's terminator token,
the list ends with one end-of-sequence id wherever a key may end, and after `max_keys` keys only
that end id may follow. The method states *what* may be generated; each backend compiles it:

* the local transformers backend into a logits processor (`scgmem.llm.local.constraint`);
* a serving engine into an llguidance Lark grammar over token ids
  (`scgmem.llm.served.lark_trie`) plus client-side steps (`scgmem.llm.served.keys`).

Which token may come next is one rule for both, `scgmem.llm.key_rule`.

A constrained `generate` returns, besides the ids, the *raw* log-prob of every generated token
(under the model's own distribution, before any mask: `Generation.token_logprobs`) and of the end
id that closed the list (`Generation.end_logprob`); the method reads its keys from those.

This module imports nothing from scgmem, so the protocol can name it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol


NO_NODE = -1  # what `TrieView.child` returns when the node has no edge labelled with the token


class TrieView(Protocol):
    """The read-only questions a backend asks of a token trie (`scgmem.core.schema.TokenTrie`).

    `child` gives NO_NODE where there is no edge; `edges` yields (token, child) pairs; `count` is
    the number of keys below a node; `parent` and `token_into` name the edge into a node."""

    ROOT: int
    vocab_size: int
    max_depth: int

    def child(self, node: int, token: int) -> int: ...

    def edges(self, node: int) -> Iterator[tuple[int, int]]: ...

    def num_children(self, node: int) -> int: ...

    def count(self, node: int) -> int: ...

    def parent(self, node: int) -> int: ...

    def token_into(self, node: int) -> int: ...


@dataclass(frozen=True)
class KeyConstraint:
    """A list of keys of a token trie.

    Attributes:
        trie: the keys as a token trie; every key ends with an edge labelled `terminator`.
        terminator: the separator token that ends a key inside the list.
        end_id: the one end-of-sequence id that may end the list (where a key may end).
        max_keys: keys per list (None = until `end_id`); the last key ends with `end_id`.
        distinct: a list never repeats a key.
        record_logprobs: the caller reads raw log-probs (False lets a backend skip them).
    """

    trie: TrieView
    terminator: int
    end_id: int
    max_keys: int | None = None
    distinct: bool = True
    record_logprobs: bool = True

    def __post_init__(self) -> None:
        if self.max_keys is not None and self.max_keys < 1:
            raise ValueError(f"max_keys must be >= 1 or None, got {self.max_keys}")
        for name in ("terminator", "end_id"):
            value = getattr(self, name)
            if not 0 <= value < self.trie.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary [0, {self.trie.vocab_size})")
