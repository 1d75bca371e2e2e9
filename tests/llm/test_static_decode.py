"""`model.static_cache` / `model.compile`: the same tokens as the eager DynamicCache path (fp32, CPU)."""
import pytest

from scgmem.llm import LLM
from scgmem.llm.local.static_decode import row_bucket, slot_bucket

SHARED = ("Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired. "
          "Melanie painted a sunrise by the lake; she loves hiking, camping and pottery. ") * 2
QUESTIONS = ["What did Caroline research?", "When did Melanie run a charity race?", "coffee"]


def make(tiny_model_dir, **kw):
    return LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4, memo_entries=0,
               prefix_cache_min_tokens=8, **kw)


def prompts_for(llm):
    return [llm.render(f"Context: {SHARED}\nQuestion: {q}") for q in QUESTIONS]


def assert_same(a, b):
    assert [g[0].token_ids for g in a] == [g[0].token_ids for g in b]
    assert [g[0].logprob for g in a] == pytest.approx([g[0].logprob for g in b], abs=1e-3)


def test_buckets():
    assert [row_bucket(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    assert [slot_bucket(n) for n in (1, 256, 257, 700, 2049)] == [256, 256, 512, 1024, 4096]


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_static_cache_matches_dynamic(tiny_model_dir, prefix_cache):
    eager = make(tiny_model_dir, prefix_cache=prefix_cache)
    static = make(tiny_model_dir, prefix_cache=prefix_cache, static_cache=True)
    prompts = prompts_for(eager)
    for call in (prompts, prompts[:1], prompts):  # 3 rows pad to 4; the second call reuses the prefix
        assert_same(eager.generate(call, max_new_tokens=10), static.generate(call, max_new_tokens=10))
    seeds = [1, 2, 3]
    assert_same(eager.generate(prompts, max_new_tokens=8, temperature=0.7, seeds=seeds),
                static.generate(prompts, max_new_tokens=8, temperature=0.7, seeds=seeds))
    assert static.usage.snapshot() == eager.usage.snapshot()  # padded rows are not counted
    assert (static.usage.snapshot()["other"]["cached_prompt_tokens"] > 0) == prefix_cache
    report = static.generation_report()["static_decode"]
    assert report["batches"] >= 4 and report["compiled_graphs"] is None
    assert {rows for rows, _ in report["shapes"]} <= {1, 2, 4} and all(slots % 256 == 0 for _, slots in report["shapes"])


def test_beam_search_stays_on_the_eager_path(tiny_model_dir):
    static = make(tiny_model_dir, static_cache=True)
    [[a, b]] = static.generate(prompts_for(static)[:1], max_new_tokens=6, num_beams=2, num_return_sequences=2)
    assert static.static.batches == 0


@pytest.mark.slow
def test_compiled_greedy_matches_eager(tiny_model_dir):
    eager = make(tiny_model_dir, prefix_cache=True)
    compiled = make(tiny_model_dir, prefix_cache=True, compile=True)
    prompts = prompts_for(eager)
    for call in (prompts, prompts[:2], prompts):
        assert_same(eager.generate(call, max_new_tokens=8), compiled.generate(call, max_new_tokens=8))
    report = compiled.generation_report()["static_decode"]
    assert report["compile"] is True and report["compiled_graphs"] >= 1
    assert report["compiled_graphs"] <= 2 * len(report["shapes"])  # bounded by the buckets


def test_shards_merge_their_static_decode_counts(tmp_path):
    from scgmem.report.merge import MergeError
    from scgmem.report.merge_fields import check_same_settings, merged_generation

    def report(batches, graphs, shapes):
        return {"generation": {"cap_profile": "paper", "attn_implementation": "gqa_sdpa", "calls": {},
                               "static_decode": {"compile": True, "batches": batches, "shapes": shapes,
                                                 "compiled_graphs": graphs}}}
    a, b = report(3, 2, [[1, 256]]), report(5, 1, [[1, 256], [8, 512]])
    check_same_settings([(tmp_path / "a", a), (tmp_path / "b", b)], MergeError)  # tallies may differ
    assert merged_generation([a, b])["static_decode"] == {"compile": True, "batches": 8, "compiled_graphs": 3,
                                                          "shapes": [[1, 256], [8, 512]]}
