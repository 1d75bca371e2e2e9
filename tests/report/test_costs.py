"""`scgmem-report costs`: per-run scores and costs, per ingested turn as the runner counted them."""
from __future__ import annotations

import csv
import json

import pytest

from scgmem.report.cli import main
from tests.report import rec, write_run

TOKENS = {"ingest": {"calls": 40, "prompt_tokens": 3000, "generated_tokens": 1000},
          "recall": {"calls": 4, "prompt_tokens": 400, "generated_tokens": 20},
          "answer": {"calls": 4, "prompt_tokens": 800, "generated_tokens": 40}}


def test_costs_per_turn_and_per_question(tmp_path):
    # Records hold fractions; summaries (and the table) percent.
    records = [rec("conv-26", i, cat, 0.5) for i, cat in enumerate([1, 2, 4, 5])]
    write_run(tmp_path / "runs" / "a", model="m", method="amem", records=records, tokens=TOKENS,
              timing=(12.0, 8.0), samples=["conv-26"], ingested_turns={"conv-26": 419})
    assert main(["costs", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "tables" / "costs.csv", newline="") as f:
        [row] = list(csv.DictReader(f))
    assert int(row["turns"]) == 419
    assert float(row["ingest_calls_per_turn"]) == pytest.approx(40 / 419)
    assert float(row["ingest_tokens_per_turn"]) == pytest.approx(4000 / 419)
    assert float(row["calls_per_question"]) == pytest.approx(8 / 4)
    assert float(row["tokens_per_question"]) == pytest.approx((420 + 840) / 4)
    assert float(row["multi_hop_f1"]) == pytest.approx(50.0)
    assert "| m | amem | 4 |" in (tmp_path / "out" / "tables" / "costs.md").read_text()


def test_turns_add_up_over_the_run_samples(tmp_path):
    records = [rec(s, 0, 1, 0.5) for s in ("conv-26", "conv-30")]
    write_run(tmp_path / "runs" / "a", model="m", method="amem", records=records, tokens=TOKENS,
              samples=["conv-26", "conv-30"], ingested_turns={"conv-26": 419, "conv-30": 369})
    assert main(["costs", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "tables" / "costs.csv", newline="") as f:
        [row] = list(csv.DictReader(f))
    assert int(row["turns"]) == 419 + 369


@pytest.mark.parametrize("turns, needle", [(None, "no field data.ingested_turns"),
                                           ({"conv-26": 419}, "no count for sample(s) ['conv-30']")])
def test_a_summary_without_turn_counts_is_one_line_naming_the_field(tmp_path, capsys, turns, needle):
    run = write_run(tmp_path / "runs" / "a", model="m", method="amem", records=[rec("conv-26", 0, 1, 0.5)],
                    samples=["conv-26", "conv-30"])
    summary = json.loads((run / "summary.json").read_text())
    if turns is None:  # as written before the runner counted turns
        del summary["data"]["ingested_turns"], summary["data"]["ingested_turns_total"]
    else:
        summary["data"]["ingested_turns"] = turns
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["costs", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / "summary.json") in err and needle in err


def test_costs_without_runs_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["costs", "--runs", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
