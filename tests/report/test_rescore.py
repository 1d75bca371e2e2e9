"""`scgmem-report rescore`: a finished run's stored answers scored again under each gold."""
from __future__ import annotations

import csv
import json

import pytest

from scgmem.report import cli
from scgmem.report.collect import load_run
from scgmem.report.rescore import rescore_run
from scgmem.scoring.protocols import NOT_MENTIONED
from scgmem.scoring.protocols import AmemProtocol
from tests.report import CATEGORIES, data_record, write_run

PROTOCOL = {"_target_": "scgmem.scoring.protocols.AmemProtocol", "temperature": None, "max_new_tokens": 50,
            "cat5_reference": "adversarial", "chat": {"system_prompt": "x"}, "answer_format": "json",
            "bertscore": True,  # BERTScore is never rescored: the roberta model is not needed
            "judge": None}  # every run's config holds it: rescore crashed on it (issue 48)


@pytest.fixture()
def run_dir(tmp_path, locomo_path):
    """Three answers as a run under the original gold stored them (F1 and BLEU-1 of A-MEM's scoring)."""
    protocol = AmemProtocol(CATEGORIES, cat5_reference="adversarial")
    records = [
        data_record(locomo_path, "conv-30", 31, "six months", ["D1:2"], protocol),  # the audit: "five months"
        data_record(locomo_path, "conv-26", 1, "2022", ["D1:14"], protocol),
        data_record(locomo_path, "conv-26", 152, NOT_MENTIONED, [], protocol),
    ]
    run = write_run(tmp_path / "run", model="m", method="scgmem", records=records)
    summary = json.loads((run / "summary.json").read_text())
    summary["config"] |= {"protocol": PROTOCOL, "data": {"_target_": "scgmem.data.locomo.LoCoMoSource",
                                                          "path": str(locomo_path), "samples": ["conv-26", "conv-30"],
                                                          "scored_categories": [1, 2, 4, 5]}}
    # write_run's made-up turn counts would contradict the data file this config now names (the
    # report checks them against it: harness/checked_run.py); a run that states none is checked on the rest
    for key in ("ingested_turns", "ingested_turns_total"):
        (summary.get("data") or {}).pop(key, None)
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_rescoring_under_the_runs_gold_reproduces_it_and_audited_uses_the_corrections(run_dir):
    run = load_run(run_dir)
    original, records = rescore_run(run, "original", n_resamples=20)
    assert original["records_changed"] == 0 and original["replaced"] == {}
    assert [r["f1"] for r in records] == [1.0, 1.0, 0.0]
    audited, records = rescore_run(run, "audited", n_resamples=20)
    assert records[0]["reference"] == "five months" and records[0]["f1"] == pytest.approx(0.5)  # {six, months}
    assert records[1]["evidence_recall"] == 1.0  # the corrected citation D1:14 was retrieved
    assert audited["records_changed"] == 1
    assert audited["replaced"] == {"1": {"answers": 1, "evidence": 1}, "2": {"answers": 0, "evidence": 1}}
    assert audited["category5"]["refusal_rate"] == 1.0 and audited["average_1_4"]["categories"] == [1, 2, 4]


def test_cli_writes_the_comparison_and_refuses_a_question_the_data_does_not_hold(run_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["rescore", str(run_dir), "--gold", "original", "--gold", "audited", "--out", str(out),
                     "--n-resamples", "20"]) == 0
    rows = list(csv.DictReader(open(out / "gold_comparison.csv")))
    assert [r["gold"] for r in rows] == ["original", "audited"] and rows[1]["answers_replaced"] == "1"
    md = (out / "gold_comparison.md").read_text()
    assert "scgmem-report rescore" in md and "| audited |" in md and "1 of 3" in md
    assert not (out / "summary.json").exists()  # never taken for a run by the report
    lines = (run_dir / "predictions.jsonl").read_text().splitlines()
    first = json.loads(lines[0]) | {"question": "Another question?"}
    (run_dir / "predictions.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert cli.main(["rescore", str(run_dir), "--gold", "audited", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 1 (conv-30 qa 31): field 'question'" in err and "differs from the data" in err and "\n" not in err
