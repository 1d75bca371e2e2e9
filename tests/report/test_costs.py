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
    assert "| m | A-MEM | 4 |" in (tmp_path / "out" / "tables" / "costs.md").read_text()


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
    else:  # the total edited with them (checked_run refuses a total that is not their sum)
        summary["data"]["ingested_turns"], summary["data"]["ingested_turns_total"] = turns, sum(turns.values())
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["costs", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / "summary.json") in err and needle in err


def test_costs_without_runs_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["costs", "--runs", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def _resumed_run(tmp_path, *, prompt_tokens: bool = True, answers_logged: int = 2):
    """8 answers of which the summary's counts saw `answers_logged` (the last resume, before
    summary.json had `tokens_questions`), each record's answer prompt 100 tokens."""
    from scgmem.report.collect import collect

    records = [rec("conv-26", i, cat, 0.5) for i, cat in enumerate([1, 2, 4, 5] * 2)]
    if not prompt_tokens:
        for r in records:
            del r["prompt_tokens"]
    logged = {"ingest": {"calls": 8, "prompt_tokens": 800, "generated_tokens": 0},
              "recall": {"calls": answers_logged, "prompt_tokens": 150 * answers_logged, "generated_tokens": 5 * answers_logged},
              "answer": {"calls": answers_logged, "prompt_tokens": 100 * answers_logged, "generated_tokens": 5 * answers_logged}}
    run_dir = write_run(tmp_path / "runs" / "readagent", model="m", method="readagent", records=records, tokens=logged,
                        samples=["conv-26"], ingested_turns={"conv-26": 419})
    summary = json.loads((run_dir / "summary.json").read_text())
    del summary["tokens_questions"]  # as written before the runner counted the records its counts cover
    (run_dir / "summary.json").write_text(json.dumps(summary))
    [run] = collect(tmp_path / "runs")
    return run


def _md_row(tmp_path) -> str:
    assert main(["costs", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    return next(line for line in (tmp_path / "out" / "tables" / "costs.md").read_text().splitlines()
                if "| ReadAgent |" in line)


def test_a_resumed_run_without_tokens_questions_reports_its_records_own_prompt_tokens(tmp_path):
    """The counts saw 2 of 8 answers: spread over 8 they would say 65 tokens a question (ReadAgent on
    conv-26 showed 81 where its records average 3,908); the records' own prompts say 100, a lower bound."""
    from scgmem.report.costs import cost_row
    from scgmem.report.figures import cost_data

    run = _resumed_run(tmp_path)
    row = cost_row(run)
    assert row["tokens_per_question"] == pytest.approx(100.0) and row["calls_per_question"] is None
    assert row["tokens_basis"] == "answer prompts of the records"
    assert cost_data([run], n_resamples=50)[0]["tokens_per_question"] == pytest.approx(800 / 8 + 100.0)
    cells = _md_row(tmp_path).split(" | ")
    assert "≥ 100 (answer prompts only)" in cells and "unknown" in cells


def test_a_resumed_run_without_prompt_tokens_in_its_records_is_unknown(tmp_path):
    from scgmem.report.costs import cost_row
    from scgmem.report.figures import cost_data, cost_vs_f1

    run = _resumed_run(tmp_path, prompt_tokens=False)
    row = cost_row(run)
    assert row["tokens_per_question"] is None and row["calls_per_question"] is None
    assert cost_data([run], n_resamples=50)[0]["tokens_per_question"] is None
    assert _md_row(tmp_path).split(" | ").count("unknown") == 2
    assert cost_vs_f1([run], tmp_path / "fig", n_resamples=50)[0].is_file()  # drawn on the seconds panel only


def test_an_old_summary_whose_counts_saw_every_answer_divides_by_all(tmp_path):
    # Without tokens_questions, the records' answer prompts adding up to the summary's (100 x 8) show
    # that the counts cover every record.
    from scgmem.report.costs import cost_row

    row = cost_row(_resumed_run(tmp_path, answers_logged=8))
    assert row["tokens_per_question"] == pytest.approx(155 + 105) and row["calls_per_question"] == pytest.approx(2.0)
    assert row["tokens_basis"] == "counts" and row["covered"] == 8


def test_each_scgmem_row_names_its_settings(tmp_path):
    records = [rec("conv-26", i, cat, 0.5) for i, cat in enumerate([1, 2, 4, 5])]
    for name, cfg in (("full", {}), ("k5", {"k": 5}), ("no_c", {"constraint": False})):
        write_run(tmp_path / "runs" / name, model="m", method="scgmem", records=records, samples=["conv-26"],
                  ingested_turns={"conv-26": 419}, method_cfg={"k": 35, "hops": 1, "constraint": True, **cfg})
    assert main(["costs", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "tables" / "costs.md").read_text()
    for label in ("SCG-Mem (k=5, hops=1)", "SCG-Mem (k=35, hops=1)", "SCG-Mem (k=35, hops=1, w/o constraint)"):
        assert f"| {label} |" in md, label
