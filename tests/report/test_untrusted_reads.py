"""Issue 48: reports read run directories only through the resume's checks (scgmem/harness/checked_run.py).

Each hostile try of the issue is one test: a forged summary, forged or duplicated records, a claim
from edited f1 fields, an interpolation in a stored config, a link where an output goes, a forged
merge shard, a FIFO in a run directory. Each is refused in one line (exit 2) and changes no file;
a hypothesis-fuzzed edit of a good run either is refused or changes no number a report prints.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scgmem.harness.checked_run import read_checked_run
from scgmem.harness.untrusted import StoredFileError
from scgmem.report.cli import main
from scgmem.report.collect import collect
from scgmem.scoring.metrics import aggregate, bleu1, f1_amem
from tests.report import CATEGORIES, rec, write_run

F1 = [1.0, 0.5, 0.5, 0.0, 1.0, 0.5, 0.0, 1.0]


def _records(scores=F1) -> list[dict]:
    return [rec("conv-1", i, [1, 2, 4, 5][i % 4], f) for i, f in enumerate(scores)]


def _run(root: Path, method: str = "scgmem", scores=F1, **kw) -> Path:
    return write_run(root / method, model="m", method=method, records=_records(scores), **kw)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _edit_json(path: Path, edit) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))


def _edit_records(path: Path, edit) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in edit(records)))


def _costs(root: Path, tmp_path: Path) -> int:
    return main(["costs", "--runs", str(root), "--out", str(tmp_path / "out")])


def test_a_summary_whose_f1_is_not_the_records_aggregate_is_refused(tmp_path, capsys):
    run = _run(tmp_path / "runs")
    _edit_json(run / "summary.json", lambda s: s["categories"]["multi_hop"].update(f1=25000.0))
    assert _costs(tmp_path / "runs", tmp_path) == 2
    line = _one_line(capsys)
    assert "summary.json: categories" in line and "the records give" in line
    assert not (tmp_path / "out" / "tables" / "costs.md").exists()


def test_a_summary_number_past_float_range_is_refused(tmp_path, capsys):
    run = _run(tmp_path / "runs")
    text = (run / "summary.json").read_text().replace('"ingest_s": 0.0', '"ingest_s": 1e400')
    (run / "summary.json").write_text(text)
    assert _costs(tmp_path / "runs", tmp_path) == 2
    assert "timing.ingest_s: inf: must be a finite number" in _one_line(capsys)


@pytest.mark.parametrize("value", [25000.0, "NaN"])
def test_records_with_forged_scores_are_refused_by_every_table(tmp_path, capsys, value):
    run = _run(tmp_path / "runs")
    raw = (run / "predictions.jsonl").read_text().splitlines()
    first = json.loads(raw[0])
    first["f1"] = 0.0  # placeholder, replaced as text: NaN is not JSON, and the reader must refuse it
    raw[0] = json.dumps(first).replace('"f1": 0.0', f'"f1": {value}')
    (run / "predictions.jsonl").write_text("\n".join(raw) + "\n")
    assert main(["table1", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
                 "--paper-model", "none", "--n-resamples", "20"]) == 2
    line = _one_line(capsys)
    assert "predictions.jsonl: line 1" in line
    assert not (tmp_path / "out" / "tables" / "table1.md").exists()


def test_duplicated_records_and_a_foreign_question_are_refused(tmp_path, capsys):
    run = _run(tmp_path / "runs")
    _edit_records(run / "predictions.jsonl", lambda rs: rs + [rs[0]] * 40)
    assert _costs(tmp_path / "runs", tmp_path) == 2
    assert "field 'qa_index'" in (line := _one_line(capsys)) and "duplicate of line 1" in line
    _edit_records(run / "predictions.jsonl", lambda rs: rs[:8] + [{**rs[0], "qa_index": 99, "category": 3}])
    assert _costs(tmp_path / "runs", tmp_path) == 2
    assert "line 9: field 'category': 3" in _one_line(capsys)
    _edit_records(run / "predictions.jsonl", lambda rs: rs[:8] + [{**rs[0], "sample_id": "conv-99"}])
    assert _costs(tmp_path / "runs", tmp_path) == 2
    assert "line 9: field 'sample_id': 'conv-99': not a conversation this run answers" in _one_line(capsys)


def test_a_claim_from_edited_f1_fields_is_refused(tmp_path, capsys):
    """The issue's headline: SCG-Mem's answers equal the baseline's, its f1 fields edited to 1."""
    root = tmp_path / "runs"
    cfg = {"k": 35, "hops": 1, "constraint": True, "evolution": True}
    _run(root, "scgmem", [0.5] * 8, method_cfg=cfg)
    _run(root, "amem", [0.5] * 8)
    _edit_records(root / "scgmem" / "predictions.jsonl", lambda rs: [{**r, "f1": 1.0} for r in rs])
    assert main(["claims", "--runs", str(root), "--out", str(tmp_path / "out"), "--n-resamples", "50"]) == 2
    line = _one_line(capsys)
    assert f"{root / 'scgmem' / 'predictions.jsonl'}: line 1" in line and "field 'f1'" in line
    assert "its prediction scores 0.5" in line
    assert not (tmp_path / "out" / "tables" / "claims.md").exists()


def test_an_interpolation_in_a_stored_config_is_never_resolved(tmp_path, capsys, monkeypatch):
    secret = "s3cr3t-from-the-environment"
    monkeypatch.setenv("SCGMEM_TEST_SECRET", secret)
    run = _run(tmp_path / "runs", method_cfg={"k": "${oc.env:SCGMEM_TEST_SECRET}"})
    _edit_json(run / "summary.json", lambda s: s.pop("config"))  # only .hydra/config.yaml holds it now
    assert "${oc.env:SCGMEM_TEST_SECRET}" in (run / ".hydra" / "config.yaml").read_text()
    assert main(["table1", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
                 "--paper-model", "none", "--n-resamples", "20"]) in (0, 2)
    out = capsys.readouterr()
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert secret not in out.err + out.out + written
    [loaded] = collect(tmp_path / "runs")
    assert loaded.setting("k") == "${oc.env:SCGMEM_TEST_SECRET}"  # text, as stored


def test_a_protocol_the_project_does_not_have_is_refused_not_imported(tmp_path):
    run = _run(tmp_path / "runs")
    _edit_json(run / "summary.json", lambda s: s["config"].update(protocol={"_target_": "os.system", "command": "x"}))
    with pytest.raises(StoredFileError, match="config.protocol._target_: 'os.system'"):
        read_checked_run(run)


def test_report_outputs_are_never_written_through_a_link(tmp_path, capsys):
    _run(tmp_path / "runs")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "out" / "tables").mkdir(parents=True)
    (tmp_path / "out" / "tables" / "costs.md").symlink_to(victim)
    assert _costs(tmp_path / "runs", tmp_path) == 2
    line = _one_line(capsys)
    assert "costs.md: symlink" in line and "refused to follow it" in line
    assert victim.read_text() == "keep me\n"


def test_a_forged_merge_shard_is_refused(tmp_path, capsys):
    a = write_run(tmp_path / "a", model="m", method="amem", records=_records()[:4])
    _edit_records(a / "predictions.jsonl", lambda rs: [{**r, "f1": 125.0} for r in rs])
    b = write_run(tmp_path / "b", model="m", method="amem", records=_records()[4:])
    assert main(["merge", "--out", str(tmp_path / "merged"), str(a), str(b)]) == 2
    assert "a/predictions.jsonl: line 1" in _one_line(capsys)
    assert not (tmp_path / "merged").exists()


def test_a_fifo_in_a_run_directory_is_refused_without_blocking(tmp_path, capsys):
    run = _run(tmp_path / "runs")
    (run / "predictions.jsonl").unlink()
    os.mkfifo(run / "predictions.jsonl")  # opening it to read would block until a writer came
    assert _costs(tmp_path / "runs", tmp_path) == 2
    assert "predictions.jsonl: file: 'a FIFO'" in _one_line(capsys)


# -- fuzzed: any edit of a good run is refused, or leaves every printed number recomputable -------------

EDITS = st.one_of(
    st.tuples(st.just("record"), st.integers(0, 7),
              st.sampled_from(["f1", "bleu1", "evidence_recall", "category", "qa_index", "latency_s", "reference",
                               "prediction", "prompt_tokens"]),
              st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-10, 10**6), st.text(max_size=8),
                        st.none())),
    st.tuples(st.just("summary"), st.sampled_from(["multi_hop", "temporal", "single_hop", "adversarial"]),
              st.sampled_from(["f1", "bleu1", "n", "evidence_recall"]),
              st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-10, 10**6), st.none())),
    st.tuples(st.just("duplicate"), st.integers(0, 7), st.just(""), st.none()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=EDITS)
def test_fuzzed_edits_are_refused_or_change_no_printed_number(tmp_path_factory, edit):
    from scgmem.report.costs import cost_row

    root = tmp_path_factory.mktemp("fuzz")
    run = _run(root)
    kind, where, name, value = edit
    if kind == "record":
        _edit_records(run / "predictions.jsonl", lambda rs: [{**r, name: value} if i == where else r
                                                              for i, r in enumerate(rs)])
    elif kind == "summary":
        _edit_json(run / "summary.json", lambda s: s["categories"][where].update({name: value}))
    else:
        _edit_records(run / "predictions.jsonl", lambda rs: rs + [rs[where]])
    try:
        [loaded] = collect(root)
    except StoredFileError as e:
        assert "\n" not in str(e)
        return
    for r in loaded.records:  # every score recomputes from the stored prediction and reference
        assert r["f1"] == pytest.approx(f1_amem(r["prediction"], r["reference"]), abs=1e-9)
        assert r["bleu1"] == pytest.approx(bleu1(r["prediction"], r["reference"]), abs=1e-9)
    assert len({(r["sample_id"], r["qa_index"]) for r in loaded.records}) == len(loaded.records)
    expected = aggregate(loaded.records, CATEGORIES)
    row = cost_row(loaded)
    for cat in loaded.categories:
        for metric in ("f1", "bleu1"):
            got, want = loaded.summary["categories"][cat][metric], expected["categories"][cat][metric]
            assert got == want or (got is not None and math.isclose(got, want, abs_tol=1e-9))
        assert row[cat][-1] == expected["categories"][cat]["n"]
    assert row["average_f1"] == pytest.approx(expected["average"]["f1"])
