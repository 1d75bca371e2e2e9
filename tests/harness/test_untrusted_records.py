"""Issue 42, forged or duplicated predictions: a resumed run adopts a stored record only when it is a
question of the current data (id, question, gold, evidence, options) that recomputes to its stored
scores; anything else is refused in one line (scgmem/harness/stored_records.py)."""
from __future__ import annotations

import json
import math

import pytest

from tests.harness.untrusted_support import DATA, FAST, lines, one_line_error, pipeline, scgmem_run, small_slice, \
    write_lines

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of full_context on the scripted model: its directory and records."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    records = pipeline("full_context", run_dir).run(small_slice())
    assert len(records) >= 4
    return run_dir, records


def resumed(tmp_path, records):
    """A copy of the run with `records` as its predictions.jsonl, resumed: the records it reports."""
    run_dir = tmp_path / "resumed"
    run_dir.mkdir(exist_ok=True)
    write_lines(run_dir / "predictions.jsonl", records)
    return pipeline("full_context", run_dir).run(small_slice())


def test_an_untouched_run_resumes_with_the_same_records(finished, tmp_path):
    run_dir, records = finished
    again = resumed(tmp_path, lines(run_dir / "predictions.jsonl"))
    assert again == records


FORGERIES = {
    "duplicate": lambda rs: rs + [rs[0]],
    "qa_index 999": lambda rs: rs[:-1] + [{**rs[-1], "qa_index": 999}],
    "sample not in the data": lambda rs: rs[:-1] + [{**rs[-1], "sample_id": "conv-999"}],
    "f1 1000": lambda rs: [{**rs[0], "f1": 1000.0}] + rs[1:],
    "f1 negative": lambda rs: [{**rs[0], "f1": -0.5}] + rs[1:],
    "f1 a string": lambda rs: [{**rs[0], "f1": "1.0"}] + rs[1:],
    "bleu1 raised": lambda rs: [{**rs[0], "bleu1": min(1.0, rs[0]["bleu1"] + 0.25)}] + rs[1:],
    "prediction swapped for the gold": lambda rs: [{**rs[0], "prediction": rs[0]["reference"]}] + rs[1:],
    "reply and prediction swapped for the gold, scores kept":
        lambda rs: [{**rs[0], "reply": rs[0]["reference"] + '"}', "prediction": rs[0]["reference"]}] + rs[1:],
    "another question's text": lambda rs: [{**rs[0], "question": rs[1]["question"]}] + rs[1:],
    "old gold beside the new question": lambda rs: [{**rs[0], "reference": "something else"}] + rs[1:],
    "category moved": lambda rs: [{**rs[0], "category": 3 if rs[0]["category"] != 3 else 1}] + rs[1:],
    "evidence edited": lambda rs: [{**rs[0], "evidence": ["D1:1"] if rs[0]["evidence"] != ["D1:1"] else []}] + rs[1:],
    "evidence recall forged": lambda rs: [{**rs[0], "evidence_recall": 1.0 if rs[0]["evidence_recall"] != 1.0
                                           else 0.0}] + rs[1:],
    "latency negative": lambda rs: [{**rs[0], "latency_s": -1e30}] + rs[1:],
    "prompt tokens a float": lambda rs: [{**rs[0], "prompt_tokens": 1.5}] + rs[1:],
    "context turns forged": lambda rs: [{**rs[0], "context_turns": 10**6}] + rs[1:],
    "qa_index a bool": lambda rs: [{**rs[0], "qa_index": True}] + rs[1:],
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_record_is_refused_in_one_line(finished, tmp_path, forgery):
    run_dir, _ = finished
    records = FORGERIES[forgery](lines(run_dir / "predictions.jsonl"))
    with pytest.raises(ValueError) as e:
        resumed(tmp_path, records)
    assert "\n" not in str(e.value) and "predictions.jsonl" in str(e.value) and "line " in str(e.value)


def test_category5_options_must_be_the_ones_this_seed_shows(finished, tmp_path):
    run_dir, _ = finished
    records = lines(run_dir / "predictions.jsonl")
    i = next((i for i, r in enumerate(records) if r.get("options")), None)
    if i is None:
        pytest.skip("no category-5 question in this slice")
    records[i] = {**records[i], "options": records[i]["options"][::-1]}
    with pytest.raises(ValueError, match="options"):
        resumed(tmp_path, records)


@pytest.mark.parametrize("text", ["NaN", "Infinity", '{"sample_id": "conv-26", "qa_index": 0, "f1": NaN}'])
def test_nan_is_refused(finished, tmp_path, text):
    run_dir, _ = finished
    with pytest.raises(ValueError, match="line 1"):
        resumed(tmp_path, [text, *lines(run_dir / "predictions.jsonl")[1:]])


@pytest.mark.parametrize("line, field", [("[1, 2]", "line 2"), ('"a string"', "line 2"), ("{", "line 2"),
                                         ('{"sample_id": "conv-26"}', "qa_index"),
                                         ('{"qa_index": 0}', "sample_id"), ("", "line 2")])
def test_a_line_that_is_not_a_record_is_one_line_and_keeps_the_file(finished, tmp_path, line, field):
    run_dir, _ = finished
    good = lines(run_dir / "predictions.jsonl")
    records = [good[0], line, *good[1:]]
    with pytest.raises(ValueError) as e:
        resumed(tmp_path, records)
    assert field in str(e.value) and "\n" not in str(e.value)
    # nothing after the bad line was cut off (the old reader truncated the file there)
    assert (tmp_path / "resumed" / "predictions.jsonl").read_text().count("\n") == len(records)


def test_a_partly_written_last_line_is_still_dropped_and_rewritten(finished, tmp_path):
    run_dir, records = finished
    text = (run_dir / "predictions.jsonl").read_text()
    (tmp_path / "resumed").mkdir()
    (tmp_path / "resumed" / "predictions.jsonl").write_text(text[: len(text) - 30])  # killed mid-line
    again = pipeline("full_context", tmp_path / "resumed").run(small_slice())
    strip = [{k: v for k, v in r.items() if k != "latency_s"} for r in again]
    assert strip == [{k: v for k, v in r.items() if k != "latency_s"} for r in records]


def test_summary_of_a_forged_run_never_reaches_an_average_past_100(finished, tmp_path):
    """The issue's case: a duplicate, qa_index 999, an unknown sample, f1 1000 made F1 25011."""
    run_dir, _ = finished
    good = lines(run_dir / "predictions.jsonl")
    forged = good + [good[0], {**good[1], "qa_index": 999}, {**good[2], "sample_id": "conv-x"},
                     {**good[3], "f1": 1000.0}]
    with pytest.raises(ValueError):
        resumed(tmp_path, forged)


def test_scgmem_run_refuses_a_forged_record_before_the_model_loads(tmp_path):
    run_dir = tmp_path / "run"
    assert scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}").returncode == 0
    records = lines(run_dir / "predictions.jsonl")
    run_json = (run_dir / "run.json").read_bytes()
    write_lines(run_dir / "predictions.jsonl", [{**records[0], "f1": 1000.0}, *records[1:]])
    line = one_line_error(scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}"))
    assert "predictions.jsonl" in line and "'f1'" in line and "1000.0" in line
    assert (run_dir / "run.json").read_bytes() == run_json  # refused before run.json is rewritten
    assert len(lines(run_dir / "predictions.jsonl")) == len(records)  # nothing removed
    summary = json.loads((run_dir / "summary.json").read_text())
    assert math.isfinite(summary["average"]["f1"]) and summary["average"]["f1"] <= 100
