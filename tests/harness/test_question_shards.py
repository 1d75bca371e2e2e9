"""run.question_shard: N processes answer one conversation's fixed chunks side by side, and their
union (by `scgmem-report merge`, or by finishing a shard's directory without the shard) is what one
process writes. usage.jsonl keeps every attempt's recall/answer counts in summary.json."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from scgmem.report.merge import MergeError, merge_runs, merge_summaries
from tests.harness.test_run_e2e import comparable, records, scgmem_run

# 4 scored questions in chunks of 1: shard 0/2 answers chunks 0 and 2, shard 1/2 chunks 1 and 3
SLICE = ["method=last_turns", "method.k=5", "data.samples=[conv-26]", "data.questions_per_category=1",
         "run.answer_batch_size=1", "run.progress=false", "run.use_memory_cache=false"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    scgmem_run(*SLICE, f"hydra.run.dir={root / 'whole'}")
    scgmem_run(*SLICE, "run.question_shard=0/2", f"hydra.run.dir={root / 's0'}")
    scgmem_run(*SLICE, "run.question_shard=1/2", f"hydra.run.dir={root / 's1'}")
    # a shard's directory finished by an unsharded rerun (a second attempt, as after a kill)
    scgmem_run(*SLICE, "run.question_shard=1/2", f"hydra.run.dir={root / 'finished'}")
    scgmem_run(*SLICE, f"hydra.run.dir={root / 'finished'}")
    return root


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def question_tokens(s: dict) -> dict:
    """Calls and tokens of recall/answer (prefix-cache hits depend on what else a process ran)."""
    return {phase: {k: counts[k] for k in ("calls", "prompt_tokens", "generated_tokens", "cut_at_cap")}
            for phase, counts in s["tokens"].items() if phase != "ingest"}


def test_shards_split_the_fixed_chunks(runs):
    whole = records(runs / "whole")
    order = [r["qa_index"] for r in whole]
    assert len(order) == 4
    assert [r["qa_index"] for r in records(runs / "s0")] == order[0::2]
    assert [r["qa_index"] for r in records(runs / "s1")] == order[1::2]
    assert comparable(records(runs / "s0") + records(runs / "s1")) == comparable(whole)
    assert summary(runs / "s0")["config"]["run"]["question_shard"] == "0/2"


def test_merged_question_shards_equal_one_process(runs, tmp_path):
    merge_runs([runs / "s1", runs / "s0"], tmp_path / "merged")
    whole, merged = summary(runs / "whole"), summary(tmp_path / "merged")
    assert comparable(records(tmp_path / "merged")) == comparable(records(runs / "whole"))
    for field in ("n_questions", "categories", "average", "overall_weighted", "context", "tokens_questions"):
        assert merged[field] == whole[field], field
    assert question_tokens(merged) == question_tokens(whole)
    assert merged["data"]["samples"] == ["conv-26"]  # named once, not once per shard
    assert merged["data"]["ingested_turns_total"] == whole["data"]["ingested_turns_total"]
    assert sorted(m["question_shard"] for m in merged["merged_from"]) == ["0/2", "1/2"]
    assert merged["config"]["run"]["question_shard"] is None


def test_a_finished_shard_directory_counts_every_attempt(runs):
    whole, finished = summary(runs / "whole"), summary(runs / "finished")
    assert comparable(records(runs / "finished")) == comparable(records(runs / "whole"))
    assert finished["tokens_questions"] == whole["tokens_questions"] == 4
    # without usage.jsonl the second attempt would count only its own two questions' calls
    assert question_tokens(finished) == question_tokens(whole)
    lines = [json.loads(x) for x in (runs / "finished" / "usage.jsonl").read_text().splitlines()]
    assert len({line["run"] for line in lines}) == 2 and [x["questions"] for x in lines] == [1, 2, 1, 2]


def test_question_shards_count_their_shared_memory_once(runs):
    # Both shards loaded one cached memory: its ingest seconds, tokens, deviations and keys count once.
    shards = []
    for name in ("s0", "s1"):
        s = copy.deepcopy(summary(runs / name))
        s["timing"]["ingest_s"] = 10.0
        s["tokens"]["ingest"] = {"calls": 5, "prompt_tokens": 100}
        s["method_stats"]["ingest"] = {"conv-26": {"keys_generated": 7, "keys_outside_schema": 0,
                                                  "deviations": {"fallback": 2}}}
        s["deviations"] = {"fallback": 3 if name == "s0" else 2}  # s0's answering added one
        s["structural_hallucination_counts"] = {"generated": 7 + 4, "outside_schema": 0}  # 4 recall keys each
        shards.append((runs / name, s))
    merged = merge_summaries(shards, records(runs / "s0") + records(runs / "s1"))
    assert merged["timing"]["ingest_s"] == 10.0
    assert merged["tokens"]["ingest"] == {"calls": 5, "prompt_tokens": 100}
    assert merged["deviations"] == {"fallback": 3}
    assert merged["structural_hallucination_counts"] == {"generated": 7 + 4 + 4, "outside_schema": 0}


def test_shards_of_different_slices_or_sharing_a_question_are_refused(runs, tmp_path):
    with pytest.raises(MergeError, match="qa_index .* is also in"):
        merge_runs([runs / "s0", runs / "whole"], tmp_path / "x")
    other = tmp_path / "other"
    other.mkdir()
    changed = summary(runs / "s1")
    changed["data"]["samples"] = ["conv-26", "conv-30"]
    (other / "summary.json").write_text(json.dumps(changed))
    (other / "predictions.jsonl").write_text((runs / "s1" / "predictions.jsonl").read_text())
    with pytest.raises(MergeError, match=r"other/summary.json: field data.samples shares conv-26 with .*s0"):
        merge_runs([runs / "s0", other], tmp_path / "y")


@pytest.mark.parametrize("value", ["2/2", "1", "a/b", "0/0"])
def test_a_bad_shard_is_one_line_and_exit_2(tmp_path, value):
    proc = scgmem_run(*SLICE, f"run.question_shard={value}", f"hydra.run.dir={tmp_path / 'r'}", check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "run.question_shard must be 'I/N'" in err[0], proc.stderr[-500:]
    assert not (tmp_path / "r" / "predictions.jsonl").exists()


@pytest.mark.parametrize("method", ["readagent", "memgpt"])
def test_a_resumed_run_keeps_earlier_attempts_answer_counters(method, locomo_path, tmp_path):
    # Scripted model: ReadAgent's look-ups and MemGPT's searches fail to parse, counted as deviations
    # by the method object while answering. A second attempt rebuilds that object from the memory,
    # so without usage.jsonl the first attempt's answer-time counts would vanish from the summary.
    from scgmem.data.locomo import load_locomo, select
    from scgmem.testing.scripted import fake_pipeline
    from scgmem.harness.summary import build_summary

    conversations, _ = load_locomo(locomo_path)
    conversations = select(conversations, ["conv-26"], max_sessions=1)

    def summarise(pipe, records):
        return build_summary(records=records, state=pipe.state, method_name=method, model_name="scripted",
                             protocol=pipe.protocol, categories=pipe.protocol.categories, seed=0, data_info={},
                             llm_usage=pipe._llm.usage.snapshot(), config={})

    whole = fake_pipeline(method, tmp_path / "whole", parallel=1, answer_batch_size=2)
    expected = summarise(whole, whole.run(conversations))
    first = fake_pipeline(method, tmp_path / "resumed", parallel=1, answer_batch_size=2)
    first.question_shard = (0, 2)  # the first attempt stops after half the chunks
    first.run(conversations)
    second = fake_pipeline(method, tmp_path / "resumed", parallel=1, answer_batch_size=2)
    got = summarise(second, second.run(conversations))
    answer_time = {k: n - expected["method_stats"]["ingest"]["conv-26"]["deviations"].get(k, 0)
                   for k, n in expected["deviations"].items()}
    assert any(answer_time.values()), answer_time  # the test needs counters that answering adds
    assert got["deviations"] == expected["deviations"]
    assert got["tokens_questions"] == expected["tokens_questions"] == expected["n_questions"]
    for phase in ("recall", "answer"):
        assert got["tokens"].get(phase) == expected["tokens"].get(phase), phase
