"""scgmem-report merge: shards of one command (split by data.samples) give the run one process gives."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scgmem.report.cli import main as report_main
from scgmem.report.merge import MergeError, merge_runs
from tests.harness.test_run_e2e import comparable, records, scgmem_run

SLICE = ["method=last_turns", "method.k=5", "data.questions_per_category=1", "run.progress=false",
         "run.use_memory_cache=false"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    scgmem_run(*SLICE, "data.samples=[conv-26,conv-30]", f"hydra.run.dir={root / 'whole'}")
    scgmem_run(*SLICE, "data.samples=[conv-30]", f"hydra.run.dir={root / 'b'}")
    scgmem_run(*SLICE, "data.samples=[conv-26]", f"hydra.run.dir={root / 'a'}")
    return root


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_merged_shards_equal_one_process(runs):
    assert report_main(["merge", "--out", str(runs / "merged"), str(runs / "b"), str(runs / "a")]) == 0
    whole, merged = summary(runs / "whole"), summary(runs / "merged")
    assert comparable(records(runs / "merged")) == comparable(records(runs / "whole"))
    assert [r["sample_id"] for r in records(runs / "merged")][0] == "conv-26"  # sample order, not argument order
    for field in ("n_questions", "categories", "average", "overall_weighted", "context"):
        assert merged[field] == whole[field], field
    for phase, counts in whole["tokens"].items():
        assert merged["tokens"][phase] == counts, phase
    assert merged["data"]["samples"] == ["conv-30", "conv-26"]
    assert merged["config"]["data"]["samples"] == ["conv-30", "conv-26"]  # the union, not the first shard's
    assert merged["data"]["ingested_turns"] == whole["data"]["ingested_turns"]
    assert merged["data"]["ingested_turns_total"] == whole["data"]["ingested_turns_total"]
    assert [m["n_questions"] for m in merged["merged_from"]] == [4, 4]
    assert merged["oom"] == whole["oom"] == {"splits": 0, "rows_split": 0}  # summed over the shards
    assert "placement" not in merged  # each shard ran on its own device


def test_overlapping_or_different_shards_are_refused(runs, tmp_path, capsys):
    with pytest.raises(MergeError, match="field data.samples shares conv-26 with"):
        merge_runs([runs / "a", runs / "whole"], tmp_path / "x")
    other = tmp_path / "other"
    other.mkdir()
    changed = summary(runs / "b")
    changed["config"]["method"]["k"] = 7
    (other / "summary.json").write_text(json.dumps(changed))
    (other / "predictions.jsonl").write_text((runs / "b" / "predictions.jsonl").read_text())
    with pytest.raises(MergeError, match=r"summary.json: field config.method.k differs"):
        merge_runs([runs / "a", other], tmp_path / "y")
    (other / "summary.json").write_text("{")
    assert report_main(["merge", "--out", str(tmp_path / "z"), str(runs / "a"), str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "other/summary.json: file:" in err and "not valid JSON" in err
    assert not (tmp_path / "z").exists()  # nothing written on error


def test_shards_may_keep_their_caches_in_different_folders(runs, tmp_path):
    # A shard resumed with run.cache_dir (and so model.cache_dir) moved is still the same run.
    moved = tmp_path / "moved"
    moved.mkdir()
    changed = summary(runs / "b")
    changed["config"]["run"]["cache_dir"] = "/elsewhere"
    changed["config"]["model"]["cache_dir"] = "/elsewhere/models"
    (moved / "summary.json").write_text(json.dumps(changed))
    (moved / "predictions.jsonl").write_text((runs / "b" / "predictions.jsonl").read_text())
    merge_runs([runs / "a", moved], tmp_path / "merged")
    assert summary(tmp_path / "merged")["n_questions"] == 8


def test_generation_reports_add_up_and_their_settings_must_agree(tmp_path):
    from scgmem.report.merge_fields import check_same_settings, merged_generation

    def report(calls, temperature, probe, top_k=50):
        return {"generation": {"chat_template": {"template_sha256": "t", "probe": probe, "probe_sha256": probe},
                               "caps": {}, "calls": {"answer/sampled": {"settings": {"top_k": top_k}, "calls": calls,
                                                                        "max_new_tokens": [50], "temperature": temperature,
                                                                        "stop": []}}}}
    a, b = report(3, [0.5], "first question"), report(4, [0.7], "another question")
    b["generation"]["calls"]["ingest/greedy"] = {"settings": {"top_k": 50}, "calls": 2}
    check_same_settings([(tmp_path / "a", a), (tmp_path / "b", b)], MergeError)  # probes and counts may differ
    merged = merged_generation([a, b])
    assert merged["calls"]["answer/sampled"]["calls"] == 7
    assert merged["calls"]["answer/sampled"]["temperature"] == [0.5, 0.7]
    assert merged["calls"]["ingest/greedy"]["calls"] == 2
    with pytest.raises(MergeError, match=r"b/summary.json: field generation.calls.answer/sampled.settings differs"):
        check_same_settings([(tmp_path / "a", a), (tmp_path / "b", report(4, [0.7], "q", top_k=1))], MergeError)


def test_question_shards_may_see_different_per_question_settings(tmp_path):
    # category 5 answers at another temperature: a shard with no category-5 question saw one setting,
    # a shard with only such questions the other as its first (the conv-26 MemGPT shards over vLLM)
    from scgmem.report.merge_fields import check_same_settings, merged_generation

    def report(*temperatures, top_k=50):
        seen = [{"temperature": t, "max_tokens": 50, "top_k": top_k} for t in temperatures]
        call = {"settings": seen[0], "calls": 2, "max_new_tokens": [50], "temperature": sorted(temperatures), "stop": []}
        if seen[1:]:
            call["other_settings"] = seen[1:]
        return {"generation": {"calls": {"answer/sampled": call}}}

    a, b, c = report(0.7), report(0.7, 0.5), report(0.5)
    check_same_settings([(tmp_path / "a", a), (tmp_path / "b", b), (tmp_path / "c", c)], MergeError)
    merged = merged_generation([a, b, c])["calls"]["answer/sampled"]
    assert merged["settings"]["temperature"] == 0.7 and [s["temperature"] for s in merged["other_settings"]] == [0.5]
    assert merged["temperature"] == [0.5, 0.7] and merged["calls"] == 6
    assert "other_settings" not in merged_generation([a, a])["calls"]["answer/sampled"]
    with pytest.raises(MergeError, match=r"c/summary.json: field generation.calls.answer/sampled.settings differs"):
        check_same_settings([(tmp_path / "a", a), (tmp_path / "c", report(0.5, top_k=1))], MergeError)


def test_served_shards_tally_their_requests_and_agree_on_the_engine(tmp_path):
    from scgmem.report.merge_fields import check_same_settings, merged_generation

    def report(requests, peak, dead=(), engine="vllm", constrained=0):
        return {"generation": {"calls": {}, "server": {
            "engine": engine, "max_in_flight": 16, "constrained_requests": constrained,
            "pool": {"servers": ["http://a/v1"], "requests": requests, "dead": list(dead), "max_in_flight": 16,
                     "peak_in_flight": peak}}}}

    a, b = report(48, 8, constrained=3), report(12, 2, dead=["http://a/v1"], constrained=4)
    check_same_settings([(tmp_path / "a", a), (tmp_path / "b", b)], MergeError)
    server = merged_generation([a, b])["server"]
    assert server["constrained_requests"] == 7 and server["engine"] == "vllm"
    assert server["pool"] == {"servers": ["http://a/v1"], "requests": 60, "dead": ["http://a/v1"], "max_in_flight": 16,
                              "peak_in_flight": 8}
    with pytest.raises(MergeError, match=r"b/summary.json: field generation.server.engine differs"):
        check_same_settings([(tmp_path / "a", a), (tmp_path / "b", report(12, 2, engine="llamacpp"))], MergeError)
