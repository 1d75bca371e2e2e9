"""The context each method hands to the answer prompt is recorded per question (tokens and
turns) and averaged in summary.json."""
from __future__ import annotations

from scgmem.harness.summary import context_length
from scgmem.testing.scripted import fake_pipeline


def test_context_length_is_the_mean_over_records_that_have_it():
    records = [{"context_tokens": 100, "context_turns": 4}, {"context_tokens": 50, "context_turns": 1}, {}]
    assert context_length(records) == {"mean_tokens": 75.0, "mean_turns": 2.5, "n": 2}
    assert context_length([{}]) is None


def test_every_record_counts_its_context(locomo_path, tmp_path):
    from scgmem.data.locomo import load_locomo, select

    conversations, _ = load_locomo(locomo_path)
    pipeline = fake_pipeline("full_context", tmp_path / "run", parallel=1)
    records = pipeline.run(select(conversations, ["conv-26"], max_sessions=1))
    assert records
    for r in records:
        assert r["context_turns"] == len(r["retrieved"])
        assert r["context_tokens"] <= r["prompt_tokens"]
        assert r["context_tokens"] > 0 and r["context_turns"] > 0
