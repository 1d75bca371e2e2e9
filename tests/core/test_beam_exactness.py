"""Constrained beam search (Eq. 11) on a model with several EOS ids: one way to end a key,
and the b best keys under the constraint, not the first b to finish."""
from __future__ import annotations

import math

import pytest
import torch

from scgmem.core.beam_search import constrained_beam_search
from scgmem.core.decoding import key_end_id
from scgmem.core.schema import CognitiveSchema


def schema_of(llm, words):
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    for w in words:
        schema.add(w)
    return schema


def key_logprob(llm, prompt: str, key_ids: list[int], end_id: int) -> float:
    """Teacher-forced log-prob of a key (its tokens, then the one EOS that ends it) after `prompt`."""
    ids = llm.encode(prompt)
    seq = torch.tensor([ids + key_ids + [end_id]])
    with torch.no_grad():
        logp = torch.log_softmax(llm.model(seq).logits[0].float(), dim=-1)  # (len, vocab)
    targets = key_ids + [end_id]
    return sum(float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(targets))


@pytest.fixture
def multi_eos_llm(tiny_model_dir):
    """The tiny model stopping on three ids, as Llama 3.2 does (Qwen2.5: two)."""
    from scgmem.llm import LLM

    llm = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4, memo_entries=0)
    specials = [llm.tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
    llm.eos_token_ids = sorted(set(specials))
    assert len(llm.eos_token_ids) == 3
    return llm


def test_one_eos_id_ends_keys(multi_eos_llm):
    assert key_end_id(multi_eos_llm) == multi_eos_llm.tokenizer.eos_token_id


@pytest.mark.parametrize("question", ["where?", "what art?", "any pottery class near the lake?", "coffee"])
def test_b_beams_give_b_distinct_seeds(multi_eos_llm, question):
    tiny_llm = multi_eos_llm
    # With every EOS id allowed to end a key, one key finished as two beams and the
    # deduplicated list held fewer than b seeds.
    schema = schema_of(tiny_llm, ("hiking", "hiking trip", "lake", "camping", "pottery", "art class",
                                  "coffee shop", "dog", "beach", "kids"))
    prompt = tiny_llm.render(f"Question: {question}", assistant_prefix="Keyword:")
    (found,), (row,) = constrained_beam_search(tiny_llm, schema, [prompt], num_beams=5)
    assert len(found) == 5 and len({b.concept for b in found}) == 5
    ends = {kl.keys[0].concept for kl in row if math.isfinite(kl.score)}
    assert len(ends) == len([kl for kl in row if math.isfinite(kl.score)])  # no key returned twice


@pytest.mark.parametrize("question", ["where?", "what art?", "a trip"])
def test_beam_search_returns_the_exact_top_keys_when_the_beams_can_hold_the_schema(multi_eos_llm, question):
    tiny_llm = multi_eos_llm
    # Keys of different lengths: with early stopping at the first b finished hypotheses
    # (filler beams finish too), a long key that scores higher could be cut off. With
    # b >= |S| nothing is pruned, so an exact search returns every key, scored and
    # ranked by its teacher-forced log-prob.
    words = ("lake", "hiking trip near the lake", "art class", "coffee shop and kids at the beach")
    schema = schema_of(tiny_llm, words)
    prompt = tiny_llm.render(f"Question: {question}", assistant_prefix="Keyword:")
    (found,), _ = constrained_beam_search(tiny_llm, schema, [prompt], num_beams=6)
    end = key_end_id(tiny_llm)
    exact = sorted(((key_logprob(tiny_llm, prompt, schema.key_tokens(w)[:-1], end), w) for w in words), reverse=True)
    assert [b.concept for b in found] == [w for _, w in exact]
    for b, (lp, _) in zip(found, exact):
        assert b.logprob == pytest.approx(lp, abs=1e-3)


def test_a_finished_key_may_take_one_eos_only(multi_eos_llm, monkeypatch):
    import scgmem.core.decoding as decoding
    import scgmem.llm.local.backend as local

    llm = multi_eos_llm
    schema = schema_of(llm, ("lake", "hiking"))
    built = []
    real = local.LocalKeyConstraint
    monkeypatch.setattr(local, "LocalKeyConstraint", lambda *a, **kw: built.append(real(*a, **kw)) or built[-1])
    prompt = llm.render("Question: where?", assistant_prefix="Keyword:")
    decoding.generate_keys(llm, schema, [prompt], max_keys=1)
    (proc,) = built[0](1, 1)
    lake = schema.key_tokens("lake")[:-1]  # the key's tokens without the terminator
    ids = torch.tensor([[5]])
    for t in [None] + lake:
        if t is not None:
            ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
        out = proc(ids, torch.zeros(1, len(llm.tokenizer)))
    allowed = set(torch.isfinite(out[0]).nonzero().flatten().tolist())
    assert allowed & set(llm.eos_token_ids) == {key_end_id(llm)}
