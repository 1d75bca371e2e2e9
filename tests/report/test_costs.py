"""`scgmem-report costs`: per-run scores and costs, with turns recounted from the run's data slice."""
from __future__ import annotations

import csv

import pytest

from scgmem.data.locomo import load_locomo
from scgmem.report.cli import main
from tests.report import rec, write_run


@pytest.fixture
def conv26_turns() -> int:
    convs, _ = load_locomo("data/locomo10.json")
    return next(len(c.turns) for c in convs if c.sample_id == "conv-26")


def test_costs_per_turn_and_per_question(tmp_path, conv26_turns):
    # Records hold fractions; summaries (and the table) percent.
    records = [rec("conv-26", i, cat, 0.5) for i, cat in enumerate([1, 2, 4, 5])]
    tokens = {"ingest": {"calls": 40, "prompt_tokens": 3000, "generated_tokens": 1000},
              "recall": {"calls": 4, "prompt_tokens": 400, "generated_tokens": 20},
              "answer": {"calls": 4, "prompt_tokens": 800, "generated_tokens": 40}}
    write_run(tmp_path / "runs" / "a", model="m", method="amem", records=records, tokens=tokens,
              timing=(12.0, 8.0), samples=["conv-26"])
    assert main(["costs", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "tables" / "costs.csv", newline="") as f:
        [row] = list(csv.DictReader(f))
    assert int(row["turns"]) == conv26_turns
    assert float(row["ingest_calls_per_turn"]) == pytest.approx(40 / conv26_turns)
    assert float(row["ingest_tokens_per_turn"]) == pytest.approx(4000 / conv26_turns)
    assert float(row["calls_per_question"]) == pytest.approx(8 / 4)
    assert float(row["tokens_per_question"]) == pytest.approx((420 + 840) / 4)
    assert float(row["multi_hop_f1"]) == pytest.approx(50.0)
    assert "| m | amem | 4 |" in (tmp_path / "out" / "tables" / "costs.md").read_text()


def test_costs_without_runs_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["costs", "--runs", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
