"""The key-list rule (scgmem/llm/key_rule.py) against the grammar it compiles to, on random tries.

The served backend sends `lark_trie.key_grammar(rule, state)` to an engine, whose llguidance
decides which token may come next; the local backend masks what `KeyRule.allowed` leaves out.
Hypothesis draws tries (keys of 1-3 tokens from a small vocabulary, some sharing prefixes, some
prefixes of others), list settings (max_keys, distinct) and a walk: each step picks one of the
tokens the rule allows, and llguidance, run on the compiled grammar, must allow exactly the same
tokens and accept exactly where the rule ends a key. So the two backends obey one rule, not two
that agree on one tiny model.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scgmem.core.schema import TokenTrie
from scgmem.llm.key_rule import DONE, KeyRule, RowState
from scgmem.llm.served.lark_trie import key_grammar

llguidance = pytest.importorskip("llguidance")

VOCAB = 16  # ids 1-11 spell keys; 12 is the terminator, 13-14 end ids; 0 is the toy tokenizer's own EOS
TERMINATOR, END_IDS, STOP = 12, (13, 14), 0


class _Toy:
    """A tokenizer for llguidance whose tokens are opaque ids (grammars name them as <[id]>)."""

    eos_token_id, bos_token_id, special_token_ids = STOP, None, [STOP]
    tokens = [f"<t{i}>".encode() for i in range(VOCAB)]

    def __call__(self, text):
        return []


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Toy()))


def grammar_allows(matcher) -> set[int]:
    """The tokens llguidance accepts next (its own EOS aside: it stands for "the grammar is done").
    Asked token by token (`validate_tokens`, which leaves the matcher as it is): with this toy
    tokenizer llguidance's precomputed mask (`compute_logit_bias`) misses a token that repeats the
    one before it (key [1, 1]), which `consume_token` accepts."""
    return {t for t in range(VOCAB) if t != STOP and matcher.validate_tokens([t]) == 1}


keys = st.lists(st.lists(st.integers(1, 11), min_size=1, max_size=3), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(keys=keys, max_keys=st.none() | st.integers(1, 4), distinct=st.booleans(), n_end=st.integers(1, 2),
       choices=st.lists(st.integers(0, 10 ** 6), min_size=1, max_size=24))
def test_the_rule_and_the_compiled_grammar_allow_the_same_tokens(keys, max_keys, distinct, n_end, choices):
    trie = TokenTrie(vocab_size=VOCAB)
    for key in keys:
        trie.insert(key + [TERMINATOR])
    rule = KeyRule(trie, terminator=TERMINATOR, eos_ids=END_IDS[:n_end], max_keys=max_keys, distinct=distinct)
    state, matcher = RowState(trie.ROOT), None
    for choice in choices:
        allowed = rule.allowed(state)
        if state.node == trie.ROOT:  # a new key: the client compiles its grammar from the rule's state
            if allowed == list(rule.eos_ids):  # every key is in the list: no grammar, only the end
                break
            matcher = llguidance.LLMatcher(TOKENIZER, key_grammar(rule, state))
            assert not matcher.is_error(), matcher.get_error()
        assert allowed and grammar_allows(matcher) == set(allowed), (state, allowed)
        token = allowed[choice % len(allowed)]
        assert matcher.consume_token(token)
        state = rule.step(state, token)
        key_ended = state.node == DONE or token == TERMINATOR
        assert matcher.is_accepting() == key_ended  # the grammar ends where the rule ends a key
        if state.node == DONE:
            break
        assert state.node >= 0


def test_the_rule_on_a_hand_made_trie():
    """" a, ab" style: keys [1], [1, 2], [3]; terminator 12, end id 13; at most two keys, distinct."""
    trie = TokenTrie(vocab_size=VOCAB)
    for key in ([1], [1, 2], [3]):
        trie.insert(key + [TERMINATOR])
    rule = KeyRule(trie, terminator=TERMINATOR, eos_ids=[13], max_keys=2)
    root = RowState(trie.ROOT)
    assert rule.allowed(root) == [1, 3]  # no end id where no key may end
    after_1 = rule.step(root, 1)
    assert rule.allowed(after_1) == [2, TERMINATOR, 13]  # "a" may end (either way) or go on to "ab"
    second = rule.step(after_1, TERMINATOR)
    assert second.n_keys == 1 and rule.allowed(second) == [1, 3]
    after_1_again = rule.step(second, 1)
    assert rule.allowed(after_1_again) == [2]  # "a" is spent, and the last key may not take the terminator
    assert rule.allowed(rule.step(after_1_again, 2)) == [13]  # "ab" is the last key: the end id only
    done = rule.step(rule.step(after_1_again, 2), 13)
    assert done.node == DONE and done.n_keys == 2 and rule.allowed(done) == []
