"""The LLM judge: reply parsing, the prompt's pinning, aggregation math and resuming, on a scripted model."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from scgmem.harness.judging import (JUDGE_SETTINGS, JUDGEMENTS, JudgeMismatch, judge_options, judge_records,
                                    judged_fraction, read_judgements)
from scgmem.llm.doubles.fake import ScriptedLLM
from scgmem.scoring.judge import NOT_MENTIONED, Judge, judge_scores
from scgmem.scoring.judge_prompt import JUDGE_PROMPT_VERSION, judge_messages, parse_label
from scgmem.scoring.metrics import average_ci, bootstrap_ci

CATS = {1: "multi_hop", 2: "temporal"}


@pytest.mark.parametrize("reply, label, parsed", [
    ("CORRECT", "CORRECT", True),
    ("wrong", "WRONG", True),
    ("**Correct.**", "CORRECT", True),
    ("  'WRONG' because the date differs", "WRONG", True),
    ("Label: correct", "CORRECT", True),
    ("Final verdict: WRONG", "WRONG", True),
    ('{"label": "CORRECT"}', "CORRECT", True),
    ('Here: {"verdict": "wrong", "reason": "other city"}', "WRONG", False),  # the verdict is the start
    ("The prediction is incorrect.", "WRONG", False),         # a label after the start is not the verdict
    ("INCORRECT", "WRONG", True),                             # "incorrect" is not "correct"
    ("The answer is correct", "WRONG", False),                # (tests/scoring/test_judge_injection.py)
    ("CORRECT or WRONG", "CORRECT", True),                     # leads with a label: the first word counts
    ("It could be correct or wrong", "WRONG", False),          # both kinds, neither first: unparsed
    ("I am not sure", "WRONG", False),
    ("", "WRONG", False),
    ("correctly answered", "WRONG", False),                    # whole words only
])
def test_parse_label(reply, label, parsed):
    assert parse_label(reply) == (label, parsed)


def test_prompt_is_pinned_and_carries_all_three_texts():
    messages = judge_messages("When did she  go?", "7 May 2023", "")
    body = messages[-1]["content"]
    assert "Question: When did she go?" in body and "Gold answer: 7 May 2023" in body
    assert "Predicted answer: (empty)" in body
    assert re.fullmatch(r"scgmem-judge-v\d+", JUDGE_PROMPT_VERSION)


def _records():
    # three questions of category 1, two of category 2
    return [{"sample_id": "c", "qa_index": i, "category": cat, "question": f"q{i}?", "reference": f"gold{i}",
             "prediction": f"pred{i}"} for i, cat in enumerate([1, 1, 1, 2, 2])]


def _rows(labels: dict[int, list[str]]) -> list[dict]:
    """labels: run -> label per record of _records()."""
    return [{**{k: r[k] for k in ("sample_id", "qa_index", "category")}, "run": run, "label": lab, "parsed": True}
            for run, labs in labels.items() for r, lab in zip(_records(), labs)]


def test_scores_are_means_and_stds_over_runs_with_question_bootstrap():
    C, W = "CORRECT", "WRONG"
    rows = _rows({0: [C, C, W, C, W], 1: [C, W, W, C, C], 2: [C, C, C, W, W]})
    out = judge_scores(rows, CATS, n_resamples=300, seed=1)
    mh = out["categories"]["multi_hop"]
    assert mh["runs"] == pytest.approx([200 / 3, 100 / 3, 100.0])
    assert mh["mean"] == pytest.approx(np.mean([200 / 3, 100 / 3, 100.0]))
    assert mh["std"] == pytest.approx(np.std([200 / 3, 100 / 3, 100.0], ddof=1))
    # the CI is the metrics module's bootstrap of each question's share of CORRECT runs
    assert mh["ci"] == pytest.approx(list(bootstrap_ci([100.0, 200 / 3, 100 / 3], 300, 1)))
    tmp = out["categories"]["temporal"]
    assert tmp["runs"] == pytest.approx([50.0, 100.0, 0.0]) and tmp["n"] == 2
    assert out["average"]["runs"] == pytest.approx([(200 / 3 + 50) / 2, (100 / 3 + 100) / 2, 50.0])
    per_q = [{"category": c, "judge": f} for c, f in [(1, 1.0), (1, 2 / 3), (1, 1 / 3), (2, 2 / 3), (2, 1 / 3)]]
    assert out["average"]["ci"] == pytest.approx(list(average_ci(per_q, CATS, "judge", 300, 1)))
    assert out["overall_weighted"]["runs"] == pytest.approx([60.0, 60.0, 60.0])
    assert out["overall_weighted"]["std"] == pytest.approx(0.0)
    assert out["n_runs"] == 3 and out["unparsed"] == {"count": 0, "of": 15}


def test_one_run_has_no_std_and_unparsed_are_counted():
    rows = _rows({0: ["CORRECT", "WRONG", "WRONG", "CORRECT", "WRONG"]})
    rows[1]["parsed"] = False
    out = judge_scores(rows, CATS, n_resamples=50)
    assert out["categories"]["multi_hop"]["std"] is None
    assert out["unparsed"] == {"count": 1, "of": 5}


def _judge_script(prompt: str) -> str:
    """CORRECT when the prediction names the gold's number, else a wordy WRONG; one reply unparsable."""
    gold = re.search(r"Gold answer: gold(\d)", prompt)
    pred = re.search(r"Predicted answer: pred(\d)", prompt)
    if pred and pred.group(1) == "4":
        return "no idea"
    return "CORRECT" if gold and pred and gold.group(1) in "013" else "WRONG: the prediction names another thing."


def test_judge_labels_one_run_in_one_batched_call():
    llm = ScriptedLLM(_judge_script)
    judge = Judge(llm, runs=1)
    verdicts = judge.label([judge.item(r) for r in _records()])
    assert [v.label for v in verdicts] == ["CORRECT", "CORRECT", "WRONG", "CORRECT", "WRONG"]
    assert [v.parsed for v in verdicts] == [True, True, True, True, False]
    assert len(llm.prompts) == 5 and llm.usage.snapshot()["judge"]["calls"] == 5


def test_category5_is_judged_against_not_mentioned_unless_asked():
    record = {"sample_id": "c", "qa_index": 9, "category": 5, "question": "q?", "reference": "the trap",
              "prediction": "p"}
    assert Judge(ScriptedLLM(["x"])).item(record).gold == NOT_MENTIONED
    assert Judge(ScriptedLLM(["x"]), cat5_gold="reference").item(record).gold == "the trap"


def test_a_sampled_judge_sends_one_seed_per_question_and_run(tmp_path):
    seen = []

    class Recording(ScriptedLLM):
        def generate(self, prompts, **kw):
            seen.append(kw["seeds"])
            return super().generate(prompts, **kw)

    judge = Judge(Recording(_judge_script), runs=2, temperature=0.7)
    judge_records(judge, _records(), tmp_path, CATS)
    assert len(seen) == 2 and all(len(s) == 5 for s in seen)
    assert len({s for seeds in seen for s in seeds}) == 10


def test_resume_judges_only_what_is_missing(tmp_path):
    records = _records()
    full = judge_records(Judge(ScriptedLLM(_judge_script), runs=3), records, tmp_path / "a", CATS, chunk=2)
    # a run killed after its first chunks: 4 complete lines and half a line
    lines = (tmp_path / "a" / JUDGEMENTS).read_text().splitlines(keepends=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / JUDGE_SETTINGS).write_text((tmp_path / "a" / JUDGE_SETTINGS).read_text())
    (tmp_path / "b" / JUDGEMENTS).write_text("".join(lines[:4]) + lines[4][:10])
    llm = ScriptedLLM(_judge_script)
    resumed = judge_records(Judge(llm, runs=3), records, tmp_path / "b", CATS, chunk=2)
    assert len(llm.prompts) == 15 - 4  # nothing judged twice
    rows = read_judgements(tmp_path / "b")
    assert len(rows) == 15 and len({(r["qa_index"], r["run"]) for r in rows}) == 15
    assert resumed == full
    assert judged_fraction(tmp_path / "b") == {("c", 0): 1.0, ("c", 1): 1.0, ("c", 2): 0.0, ("c", 3): 1.0,
                                               ("c", 4): 0.0}
    # a finished directory is not judged again; more runs add only the new ones
    llm = ScriptedLLM(_judge_script)
    judge_records(Judge(llm, runs=4), records, tmp_path / "b", CATS)
    assert len(llm.prompts) == 5


def test_another_judge_is_refused(tmp_path):
    judge_records(Judge(ScriptedLLM(_judge_script), runs=1), _records(), tmp_path, CATS)
    with pytest.raises(JudgeMismatch, match="another judge.*max_new_tokens"):
        judge_records(Judge(ScriptedLLM(_judge_script), runs=1, max_new_tokens=4), _records(), tmp_path, CATS)
    assert json.loads((tmp_path / JUDGE_SETTINGS).read_text())["max_new_tokens"] == 16


@pytest.mark.parametrize("value, model", [(None, "off"), ("same", None), ("qwen2.5-1.5b", "qwen2.5-1.5b"),
                                          ({"runs": 5}, None)])
def test_judge_options(value, model):
    options = judge_options(value)
    assert (options is None) if model == "off" else options["model"] == model


def test_judge_options_reject_unknown_keys():
    with pytest.raises(ValueError, match="unknown keys \\['rounds'\\]"):
        judge_options({"rounds": 3})


def _cfg(*overrides):
    from hydra import compose, initialize_config_dir

    from scgmem.harness.run import CONFIG_DIR
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_protocol_judge_in_a_run_labels_into_the_run_dir_and_is_off_by_default(tmp_path):
    from scgmem.harness.run import run_judge

    assert run_judge(_cfg(), ScriptedLLM(_judge_script), _records(), tmp_path, CATS) is None
    assert not (tmp_path / JUDGEMENTS).exists()
    out = run_judge(_cfg("protocol.judge={model:same,runs:2}"), ScriptedLLM(_judge_script), _records(), tmp_path, CATS)
    assert out["n_runs"] == 2 and out["settings"]["model"] == "scripted"
    assert len(read_judgements(tmp_path)) == 10


def test_turning_the_judge_on_resumes_a_finished_run_dir(tmp_path):
    from scgmem.harness.rundir import check_run_dir

    check_run_dir(tmp_path, _cfg())
    (tmp_path / "predictions.jsonl").write_text("")
    check_run_dir(tmp_path, _cfg("protocol.judge=same"))  # no RunDirMismatch: labels are not predictions
