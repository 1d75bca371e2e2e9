"""The cognitive schema S as a trie over token ids (paper Section 3.2, Eq. 4-5).

A concept enters S once: it is tokenised *as it appears in generated text* (after a
separator, so with a leading space) and followed by a terminator token (the separator
itself, e.g. ","). The terminator makes "end of key" a real edge, so a concept that is a
prefix of another ("hiking" / "hiking trip") stays distinct. Validity (Eq. 4-5) is then a
trie question: a token may follow a prefix iff prefix + token is a path of the trie.

`TokenTrie` answers it with integer nodes and, per node, a precomputed answer to "which
tokens may come next?" (GENRE's `allowed`), so decoding never walks from the root nor
re-tokenises: a sorted id tensor per node (built once after the node last changed) and,
where a node allows many tokens (the root of a large schema), a dense boolean row over the
vocabulary kept up to date at insert time (outlines-core / xgrammar shape). The tests
compare it with a plain nested-dict trie (tests/core/reference_trie.py) on random tries.

`CognitiveSchema` holds the concept set and its `TokenTrie`, and maps trie leaves back to
concepts.

Example::

    trie = TokenTrie(vocab_size=10)
    trie.insert([3, 4, 9]); trie.insert([3, 9])
    node = trie.child(TokenTrie.ROOT, 3)
    trie.allowed(node)          # tensor([4, 9])
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from scgmem.llm.constraint_spec import NO_NODE  # what `child` returns when prefix + token is not a path

if TYPE_CHECKING:
    import torch

# torch is imported where a mask is built, not with the module: the schema, the key rule and the
# served backend's grammar never touch a tensor, and `import scgmem.core` stays light (no torch,
# ~1 s) for them; only the local backend's masking processor asks `allowed` / `dense_allowed`
# (scgmem/llm/local/schema_processor.py declares them as its `MaskIndex`).


class TokenTrie:
    """The fast trie used in decoding: integer nodes, `allowed(node)`, `child(node, token)`.

    Args:
        vocab_size: size of the model's output layer (ids must be below it); the width
            of the dense rows.
        dense_threshold: a node with at least this many children also keeps a dense
            boolean row over the vocabulary, so masking a row at it is one row copy.
    """

    ROOT = 0

    def __init__(self, vocab_size: int, dense_threshold: int = 256) -> None:
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if dense_threshold <= 0:
            raise ValueError(f"dense_threshold must be positive, got {dense_threshold}")
        self.vocab_size = vocab_size
        self.dense_threshold = dense_threshold
        self._children: list[dict[int, int]] = [{}]  # node -> {token: child node}
        self._is_key: list[bool] = [False]  # node -> a key ends here
        self._count: list[int] = [0]  # node -> keys whose path passes through it
        self._parent: list[int] = [NO_NODE]
        self._token: list[int] = [NO_NODE]  # node -> the token on the edge into it
        self._allowed: list[torch.Tensor | None] = [None]  # node -> sorted ids; None = stale
        self._dense: dict[int, torch.Tensor] = {}  # node -> (vocab,) bool, True = allowed
        self.size = 0  # number of keys
        self.max_depth = 0  # longest key, in tokens

    # ------------------------------------------------------------------ building
    def insert(self, key: Sequence[int]) -> bool:
        """Add a token-id sequence; returns False when it was already present."""
        if len(key) == 0:
            raise ValueError("cannot insert an empty key into the trie")
        node = self.ROOT
        for t in key:
            t = int(t)
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"token id {t} outside the vocabulary [0, {self.vocab_size}) in key {list(key)}")
            nxt = self._children[node].get(t)
            if nxt is None:
                nxt = self._new_node(node, t)
                self._add_edge(node, t, nxt)
            node = nxt
        if self._is_key[node]:
            return False
        self._is_key[node] = True
        while node != NO_NODE:
            self._count[node] += 1
            node = self._parent[node]
        self.size += 1
        self.max_depth = max(self.max_depth, len(key))
        return True

    def _new_node(self, parent: int, token: int) -> int:
        self._children.append({})
        self._is_key.append(False)
        self._count.append(0)
        self._parent.append(parent)
        self._token.append(token)
        self._allowed.append(None)
        return len(self._children) - 1

    def _add_edge(self, node: int, token: int, child: int) -> None:
        children = self._children[node]
        children[token] = child
        self._allowed[node] = None  # rebuilt once, on the next query, not per decoding step
        dense = self._dense.get(node)
        if dense is not None:
            dense[token] = True
        elif len(children) >= self.dense_threshold:
            import torch

            row = torch.zeros(self.vocab_size, dtype=torch.bool)  # (vocab,)
            row[torch.tensor(list(children), dtype=torch.long)] = True
            self._dense[node] = row

    # ------------------------------------------------------------------ queries
    def child(self, node: int, token: int) -> int:
        """The node reached from `node` by `token`, or NO_NODE."""
        return self._children[node].get(token, NO_NODE)

    def allowed(self, node: int) -> torch.Tensor:
        """Sorted ids of the tokens that may follow `node`, a (n,) long tensor (cached)."""
        cached = self._allowed[node]
        if cached is None:
            import torch

            cached = torch.tensor(sorted(self._children[node]), dtype=torch.long)
            self._allowed[node] = cached
        return cached

    def dense_allowed(self, node: int) -> torch.Tensor | None:
        """(vocab,) bool row, True where allowed, for nodes with many children; else None."""
        return self._dense.get(node)

    def edges(self, node: int):
        """(token, child node) of every edge out of `node`, in token order (what a grammar
        compiler walks; decoding asks `allowed` instead)."""
        return iter(sorted(self._children[node].items()))

    def num_children(self, node: int) -> int:
        return len(self._children[node])

    def count(self, node: int) -> int:
        """Number of keys whose path passes through `node` (the root: all keys)."""
        return self._count[node]

    def parent(self, node: int) -> int:
        return self._parent[node]

    def token_into(self, node: int) -> int:
        """The token on the edge from `parent(node)` to `node`."""
        return self._token[node]

    def walk(self, tokens: Sequence[int], node: int = ROOT) -> int:
        """The node reached from `node` by `tokens`, or NO_NODE."""
        for t in tokens:
            node = self._children[node].get(int(t), NO_NODE)
            if node == NO_NODE:
                return NO_NODE
        return node

    def __contains__(self, key: Sequence[int]) -> bool:
        node = self.walk(key)
        return node != NO_NODE and self._is_key[node]

    def __len__(self) -> int:
        return self.size

    @property
    def num_nodes(self) -> int:
        return len(self._children)


class CognitiveSchema:
    """S: the set of concepts and its token trie (Section 3.2).

    A concept is identified by its normalised form (lowercase; see `concepts.normalise`)
    and enters the trie once, under the *surface* form it was first generated in (case
    kept, e.g. "Caroline"), because that is how the model writes it: constraining a small
    model to " caroline" would make the schema fight the model's own spelling. Each key
    is `encode(prefix + surface) + [terminator]`.

    Args:
        encode: text -> token ids, without special tokens (the LLM's `encode`).
        vocab_size: the model's output size.
        separator: the text between keys in generated lists; it must be one token and is
            the terminator of every key.
        prefix: what precedes a key in generated text (a space after ":" or ",").
        forbidden_ids: ids a key may not contain (EOS), since they end generation.
    """

    def __init__(self, encode: Callable[[str], list[int]], vocab_size: int, *, separator: str = ",",
                 prefix: str = " ", forbidden_ids: Iterable[int] = ()) -> None:
        sep = encode(separator)
        if len(sep) != 1:
            raise ValueError(f"separator {separator!r} must be exactly one token, got ids {sep}")
        self.encode = encode
        self.separator = separator
        self.prefix = prefix
        self.terminator = sep[0]
        self.forbidden_ids = {int(i) for i in forbidden_ids} | {self.terminator}
        self.trie = TokenTrie(vocab_size)  # its dense-row layout is the masking's concern (TokenTrie), not the schema's
        self.concepts: list[str] = []  # insertion order
        self.surfaces: list[str] = []  # the surface form each concept was tokenised in
        self._index: dict[str, int] = {}
        self._leaf: dict[int, int] = {}  # trie node after the terminator -> concept index

    def key_tokens(self, surface: str) -> list[int]:
        """Token ids of a key as the trie holds it (terminator included)."""
        ids = self.encode(self.prefix + surface)
        bad = [i for i in ids if i in self.forbidden_ids]
        if not ids or bad:
            raise ValueError(f"concept {surface!r} tokenises to {ids}, which is empty or holds the "
                             f"terminator/EOS ids {bad}")
        return ids + [self.terminator]

    def add(self, concept: str, surface: str | None = None) -> bool:
        """Insert `concept` (normalised) under `surface` (default: the concept itself).

        Returns False when the concept was already in S. Raises ValueError when the
        surface form cannot be a key (see `key_tokens`).
        """
        if concept in self._index:
            return False
        surface = surface or concept
        tokens = self.key_tokens(surface)
        if not self.trie.insert(tokens):  # a tokenizer that normalises text could map two surfaces to one key
            raise ValueError(f"concept {concept!r} (surface {surface!r}) tokenises like a concept already in S")
        index = len(self.concepts)
        self.concepts.append(concept)
        self.surfaces.append(surface)
        self._index[concept] = index
        self._leaf[self.trie.walk(tokens)] = index
        return True

    def concept_at(self, leaf: int) -> str | None:
        """The concept whose key ends (terminator included) at trie node `leaf`."""
        index = self._leaf.get(leaf)
        return None if index is None else self.concepts[index]

    def concept_of_tokens(self, tokens: Sequence[int]) -> str | None:
        """The concept whose key is exactly `tokens` (without the terminator), or None."""
        node = self.trie.walk(tokens)
        if node == NO_NODE:
            return None
        return self.concept_at(self.trie.child(node, self.terminator))

    def __contains__(self, concept: str) -> bool:
        return concept in self._index

    def __len__(self) -> int:
        return len(self.concepts)
