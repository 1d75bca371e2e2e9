"""The client-side decoding of scgmem/llm/served on the tiny model, fast: greedy lists key by key
and the replayed beam search, through llguidance's bitmask of our grammar, against the local trie
processor (same keys, raw log-probs close); and the request count across beam threads."""
from __future__ import annotations

import pytest

pytest.importorskip("llguidance")

WORDS = ("lake", "hiking", "hiking trip", "camping", "painting", "pottery", "music", "support group", "school")
TOL = 5e-5  # batched (local) and single-row forwards of one fp32 model differ in the last bits


@pytest.fixture(scope="module")
def pair(tiny_llm):
    from scgmem.core.schema import CognitiveSchema
    from scgmem.llm.doubles.guidance_local import GuidanceLocalLLM

    schema = CognitiveSchema(tiny_llm.encode, tiny_llm.vocab_size, forbidden_ids=tiny_llm.eos_ids)
    for w in WORDS:
        schema.add(w)
    return tiny_llm, GuidanceLocalLLM(tiny_llm), schema


def prompts(llm):
    return [llm.render(f"Message: {m}", assistant_prefix="Keywords:") for m in
            ("we went hiking by the lake", "a painting class at school", "music and pottery")]


@pytest.mark.parametrize("max_keys", [1, 3, None])
def test_greedy_lists_match_the_trie_processor(pair, max_keys):
    from scgmem.core.decoding import generate_keys

    local, served, schema = pair
    a, _ = generate_keys(local, schema, prompts(local), max_keys=max_keys)
    b, _ = generate_keys(served, schema, prompts(local), max_keys=max_keys)
    for (x,), (y,) in zip(a, b):
        assert [k.concept for k in x.keys] == [k.concept for k in y.keys]
        assert (x.complete, x.tracked) == (y.complete, y.tracked)
        for kx, ky in zip(x.keys, y.keys):
            assert kx.logprob == pytest.approx(ky.logprob, abs=TOL)


@pytest.mark.parametrize("beams", [2, 5, 12])  # 12 > the keys of S: the search runs out of keys
def test_the_replayed_beam_search_matches_transformers(pair, beams):
    from scgmem.core.beam_search import constrained_beam_search

    local, served, schema = pair
    a, _ = constrained_beam_search(local, schema, prompts(local), num_beams=beams)
    b, _ = constrained_beam_search(served, schema, prompts(local), num_beams=beams)
    for x, y in zip(a, b):
        assert [k.concept for k in x] == [k.concept for k in y]
        for kx, ky in zip(x, y):
            assert kx.logprob == pytest.approx(ky.logprob, abs=TOL)


def test_requests_are_counted_across_beam_threads(pair):
    from scgmem.core.decoding import key_end_id
    from scgmem.llm.constraint_spec import KeyConstraint
    from scgmem.llm.served.beams import beam_search
    from scgmem.llm.served.keys import KeyDecoder

    local, served, schema = pair
    constraint = KeyConstraint(schema.trie, terminator=schema.terminator, end_id=key_end_id(local), max_keys=1)
    decoder = KeyDecoder(served.engine, constraint, where="test")
    beam_search(decoder, local.encode(prompts(local)[0]), num_beams=4, max_new_tokens=schema.trie.max_depth,
                eos_ids=local.eos_ids, num_return_sequences=4)
    assert decoder.requests >= 4  # one per live beam and step, counted under the lock without a deadlock
