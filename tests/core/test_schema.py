"""The schema trie (Section 3.2): the fast trie agrees with the reference on random tries."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scgmem.core.schema import NO_NODE, CognitiveSchema, TokenTrie
from tests.core.reference_trie import ReferenceTrie

VOCAB = 12
keys_strategy = st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=5), min_size=0, max_size=30)


def test_hand_written_trie():
    trie = TokenTrie(vocab_size=10)
    assert trie.insert([3, 4, 9]) and trie.insert([3, 9]) and not trie.insert([3, 9])
    node = trie.child(TokenTrie.ROOT, 3)
    assert trie.allowed(node).tolist() == [4, 9]
    assert trie.allowed(TokenTrie.ROOT).tolist() == [3]
    assert trie.child(node, 5) == NO_NODE
    assert [3, 9] in trie and [3] not in trie and [3, 4] not in trie
    assert len(trie) == 2 and trie.max_depth == 3
    assert trie.count(TokenTrie.ROOT) == 2 and trie.count(node) == 2 and trie.count(trie.child(node, 4)) == 1
    assert trie.token_into(trie.child(node, 4)) == 4 and trie.parent(node) == TokenTrie.ROOT


def test_bad_tokens_and_empty_keys_raise():
    trie = TokenTrie(vocab_size=5)
    with pytest.raises(ValueError, match="token id 7"):
        trie.insert([1, 7])
    with pytest.raises(ValueError, match="empty key"):
        trie.insert([])


def test_allowed_cache_is_refreshed_after_insert():
    trie = TokenTrie(vocab_size=10)
    trie.insert([1, 2])
    assert trie.allowed(TokenTrie.ROOT).tolist() == [1]
    trie.insert([5])
    assert trie.allowed(TokenTrie.ROOT).tolist() == [1, 5]


@settings(max_examples=300, deadline=None)
@given(keys=keys_strategy, probes=st.lists(st.lists(st.integers(0, VOCAB - 1), max_size=6), max_size=20),
       dense_threshold=st.integers(1, 6))
def test_fast_trie_agrees_with_reference(keys, probes, dense_threshold):
    ref, fast = ReferenceTrie(), TokenTrie(VOCAB, dense_threshold=dense_threshold)
    for k in keys:
        assert ref.insert(k) == fast.insert(k)
    assert len(ref) == len(fast)
    for prefix in probes + keys + [k[:-1] for k in keys]:
        assert (prefix in ref) == (prefix in fast)
        node = fast.walk(prefix)
        expected = ref.allowed(prefix)
        if node == NO_NODE:
            assert expected == set()
            continue
        assert set(fast.allowed(node).tolist()) == expected
        dense = fast.dense_allowed(node)
        if len(expected) >= dense_threshold:
            assert dense is not None and set(torch.nonzero(dense).flatten().tolist()) == expected
        # count = keys of the reference that start with this prefix
        assert fast.count(node) == sum(1 for k in set(map(tuple, keys)) if list(k[:len(prefix)]) == prefix)


def test_schema_keys_end_with_the_terminator():
    vocab = {"hiking": 1, "trip": 2, ",": 3, "camping": 4}
    encode = lambda text: [vocab[w] for w in text.replace(",", " ,").split()]  # noqa: E731
    schema = CognitiveSchema(encode, vocab_size=6, forbidden_ids=[5])
    assert schema.add("hiking") and schema.add("hiking trip") and not schema.add("hiking")
    assert schema.key_tokens("hiking trip") == [1, 2, 3]
    # "hiking" is a prefix of "hiking trip" and stays a distinct key thanks to the terminator
    assert schema.concept_of_tokens([1]) == "hiking" and schema.concept_of_tokens([1, 2]) == "hiking trip"
    assert schema.concept_of_tokens([2]) is None
    assert "hiking trip" in schema and len(schema) == 2 and len(schema.trie) == 2


def test_schema_rejects_keys_holding_the_terminator():
    encode = lambda text: [ord(c) % 50 for c in text]  # noqa: E731
    schema = CognitiveSchema(encode, vocab_size=50, separator=",", prefix="")
    with pytest.raises(ValueError, match="terminator"):
        schema.add("a,b")
    with pytest.raises(ValueError, match="exactly one token"):
        CognitiveSchema(encode, vocab_size=50, separator=", ")


def test_schema_keeps_the_surface_form_for_the_trie():
    words = {"Caroline": 7, "caroline": 8, ",": 3}
    encode = lambda text: [words[w] for w in text.split()]  # noqa: E731
    schema = CognitiveSchema(encode, vocab_size=10)
    schema.add("caroline", "Caroline")
    assert schema.concept_of_tokens([7]) == "caroline" and schema.concept_of_tokens([8]) is None
