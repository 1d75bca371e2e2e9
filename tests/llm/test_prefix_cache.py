"""Prefix KV reuse: the same generations as a full prefill, fewer tokens prefilled."""
import pytest
import torch

from scgmem.llm import LLM
from scgmem.llm.local.prefix_cache import PrefixCache, batch_prefix_length, common_prefix_length

SHARED = ("Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired. "
          "Melanie painted a sunrise by the lake; she loves hiking, camping and pottery. ") * 3
QUESTIONS = ["What did Caroline research?", "When did Melanie run a charity race?", "coffee", "kids, beach, art class?"]


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    """The same tiny model with and without the prefix cache."""
    plain = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4, prefix_cache=False,
                memo_entries=0)
    cached = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4,
                 prefix_cache_min_tokens=8, memo_entries=0)
    return plain, cached


def prompts_for(llm):
    return [llm.render(f"Context: {SHARED}\nQuestion: {q}") for q in QUESTIONS]


def assert_same(a, b):
    for x, y in zip(a, b):
        assert x[0].token_ids == y[0].token_ids
        assert x[0].logprob == pytest.approx(y[0].logprob, abs=1e-3)


def test_helpers():
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0
    assert batch_prefix_length([[1, 2, 3, 4], [1, 2, 3, 9], [1, 2, 7]]) == 2
    assert batch_prefix_length([[1, 2, 3]]) == 2  # one row keeps its last token to feed
    assert batch_prefix_length([[5], [5, 6]]) == 0


def test_batched_shared_prefix_matches_full_prefill(pair):
    plain, cached = pair
    before = cached.usage.snapshot().get("other", {}).get("cached_prompt_tokens", 0)
    a = plain.generate(prompts_for(plain), max_new_tokens=8)
    b = cached.generate(prompts_for(cached), max_new_tokens=8)
    assert_same(a, b)
    # 4 rows of differing suffix lengths share one prefix: 3 of its 4 copies were not prefilled.
    shared = batch_prefix_length([cached.encode(p) for p in prompts_for(cached)])
    assert shared > 50
    assert cached.usage.snapshot()["other"]["cached_prompt_tokens"] - before == 3 * shared


def test_sequential_calls_reuse_the_previous_prompt(pair):
    plain, cached = pair
    cached.prefix_cache.clear()
    computed = cached.prefix_cache.prefilled_tokens
    a = [plain.generate([p], max_new_tokens=6)[0] for p in prompts_for(plain)]
    b = [cached.generate([p], max_new_tokens=6)[0] for p in prompts_for(cached)]
    assert_same(a, b)
    lengths = [len(cached.encode(p)) for p in prompts_for(cached)]
    # The first prompt is prefilled whole; the others only past the shared context.
    assert cached.prefix_cache.prefilled_tokens - computed < lengths[0] + sum(lengths[1:]) // 2


def test_sampling_matches_full_prefill(pair):
    plain, cached = pair
    a = plain.generate(prompts_for(plain), max_new_tokens=8, temperature=0.9, seeds=[1, 2, 3, 4])
    b = cached.generate(prompts_for(cached), max_new_tokens=8, temperature=0.9, seeds=[1, 2, 3, 4])
    assert_same(a, b)


def test_kept_states_are_never_mutated_by_generation(pair):
    _, cached = pair
    cached.prefix_cache.clear()
    prompt = prompts_for(cached)[0]
    first = cached.generate([prompt], max_new_tokens=6)
    [entry] = cached.prefix_cache.entries
    length = entry.states.get_seq_length()
    assert length == len(entry.ids) == len(cached.encode(prompt)) - 1
    second = cached.generate([prompt], max_new_tokens=6)
    assert entry.states.get_seq_length() == length
    assert_same(first, second)


def test_bounds_evict_oldest_and_superseded(tiny_model_dir):
    llm = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, prefix_cache=False)
    cache = PrefixCache(llm.model, min_tokens=2, max_entries=2, max_tokens=1000)
    ids = llm.encode(SHARED)
    cache.states_for(ids[:10])
    cache.states_for(ids[:20])  # extends the first: it is superseded, and 10 tokens were reused
    assert [len(e.ids) for e in cache.entries] == [20]
    assert cache.prefilled_tokens == 20
    other = llm.encode("coffee shop, hiking trip, career counseling, mental health")
    cache.states_for(other)
    cache.states_for(other[:3] + ids[:5])
    assert len(cache.entries) == 2 and cache.entries[0].ids == other  # the 20-token entry went first
    states = cache.states_for(ids[:20])
    assert states.get_seq_length() == 20
    with pytest.raises(ValueError, match="positive"):
        PrefixCache(llm.model, min_tokens=0)


def test_crop_matches_a_fresh_prefill(tiny_model_dir):
    llm = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, prefix_cache=False)
    ids = llm.encode(SHARED)
    cache = PrefixCache(llm.model, min_tokens=2)
    cache.states_for(ids[:40])
    cropped = cache.states_for(ids[:25] + ids[30:35])  # reuses 25, prefills 5
    fresh = PrefixCache(llm.model, min_tokens=2).states_for(ids[:25] + ids[30:35])
    for layer_a, layer_b in zip(cropped.layers, fresh.layers):
        torch.testing.assert_close(layer_a.keys, layer_b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(layer_a.values, layer_b.values, atol=1e-5, rtol=1e-4)
