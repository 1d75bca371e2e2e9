"""The grammar compiler and the client-side decoding, proven on identical logits: the embedded model
in fp32 constrained by llguidance's own bitmask (compiled from our Lark grammar, through llguidance's
Python package and torch helpers) against the local trie processor, on conv-26 session 1."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

llguidance = pytest.importorskip("llguidance")
DATA = Path(__file__).resolve().parents[2] / "data" / "locomo10.json"

# measured: batched (local) and single-row (in-process engine) forwards of the same fp32 model differ
# in the last bits; per key (a sum of a few tokens) at most ~1.5e-5 on this slice
TOL = 5e-5


def test_a_key_dropped_from_the_grammar_is_refused_by_llguidance():
    from llguidance.hf import from_tokenizer  # noqa: F401
    from scgmem.core.schema import TokenTrie
    from scgmem.llm.key_rule import KeyRule, RowState
    from scgmem.llm.served.lark_trie import key_grammar

    trie = TokenTrie(vocab_size=50)
    keys = [[3, 4, 9], [3, 9], [7, 9], [8, 9], [10, 11, 9]]
    for k in keys:
        trie.insert(k)
    rule = KeyRule(trie, terminator=9, eos_ids=[1])
    grammar = key_grammar(rule)
    kept = key_grammar(rule, RowState(trie.ROOT, 1, used=(trie.walk([7]), trie.walk([7, 9]))))

    def accepts(g, tokens):
        m = llguidance.LLMatcher(_toy_tokenizer(50), llguidance.LLMatcher.grammar_from_lark(g))
        return all(m.consume_token(t) for t in tokens) and m.is_accepting()

    for k in keys:
        assert accepts(grammar, k) and accepts(grammar, k[:-1] + [1])
    assert not accepts(kept, [7, 9]) and accepts(kept, [8, 9])  # the used key is gone, its sibling stays
    assert not accepts(grammar, [3, 4, 4, 9]) and not accepts(grammar, [5, 9])
    last = KeyRule(trie, terminator=9, eos_ids=[1], max_keys=1)
    assert not accepts(key_grammar(last), [3, 9])  # the last key ends with EOS


def _toy_tokenizer(n: int):
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Toy(n)))


class _Toy:
    def __init__(self, n):
        self.eos_token_id = 0
        self.bos_token_id = None
        self.tokens = [f"<t{i}>".encode() for i in range(n)]
        self.special_token_ids = [0]

    def __call__(self, text):
        return []


@pytest.fixture(scope="module")
def session1():
    if not DATA.exists():
        pytest.skip("data/locomo10.json missing (make data)")
    from scgmem.data.locomo import LoCoMoSource

    (conv,), _ = LoCoMoSource(path=str(DATA), samples=["conv-26"], max_sessions=1).load()
    return conv


def _ingest(llm, conv, embedder, monkeypatch):
    import scgmem.core.evolution as evolution
    from scgmem.core.decoding import generate_keys as real
    from scgmem.core.method import SCGMem

    seen = []

    def recording(*a, **kw):
        lists, reader = real(*a, **kw)
        seen.extend(lists)
        return lists, reader

    monkeypatch.setattr(evolution, "generate_keys", recording)
    method = SCGMem(llm, embedder)
    method.ingest(conv, np.random.default_rng(0))
    return method, seen


@pytest.mark.slow
def test_llguidance_bitmask_equals_the_trie_processor_on_session_1(smollm, session1, monkeypatch):
    from scgmem.core.recall import constrained_seeds
    from scgmem.llm.doubles.fake import BagEmbedder
    from scgmem.llm.doubles.guidance_local import GuidanceLocalLLM

    torch.set_num_threads(1)
    local, local_lists = _ingest(smollm, session1, BagEmbedder(), monkeypatch)
    served, served_lists = _ingest(GuidanceLocalLLM(smollm), session1, BagEmbedder(), monkeypatch)
    assert len(local_lists) == len(served_lists) > 0
    worst = 0.0
    for (a,), (b,) in zip(local_lists, served_lists):  # assimilation: same keys, same raw log-probs
        assert [k.concept for k in a.keys] == [k.concept for k in b.keys]
        for ka, kb in zip(a.keys, b.keys):
            worst = max(worst, abs(ka.logprob - kb.logprob))
    assert worst <= TOL, worst
    # accommodation follows from them: the same schema, the same turns grounded, the same graph
    assert local.schema.concepts == served.schema.concepts
    assert local.turn_concepts == served.turn_concepts
    questions = [qa.question for qa in session1.qa[:6]]
    seeds_a, keys_a, _ = constrained_seeds(smollm, local.schema, questions, num_beams=5)
    seeds_b, keys_b, _ = constrained_seeds(GuidanceLocalLLM(smollm), local.schema, questions, num_beams=5)
    assert seeds_a == seeds_b and keys_a == keys_b  # recall's beam search in the client
