"""`scgmem-report judge RUN_DIR` on a tiny fake run with a scripted judge, and J in Table 1."""
from __future__ import annotations

import json

import pytest

from scgmem.llm.doubles.fake import ScriptedLLM
from scgmem.report import cli, judged
from scgmem.report.collect import collect
from scgmem.report.tables import build_table1
from scgmem.report.paper import PaperTable
from scgmem.report.writers import to_latex, to_markdown
from tests.report import rec, rescored, write_run
from tests.report.test_tables import PAPER_DIR


def _run(tmp_path):
    records = [rec("conv-1", i, c, 0.5) for i, c in enumerate([1, 1, 2, 2, 4, 4, 5, 5])]
    records = [rescored({**r, "prediction": f"answer {r['qa_index']}"}) for r in records]
    return write_run(tmp_path / "runs" / "scgmem", model="m", method="scgmem", records=records)


def _script(prompt: str) -> str:
    # CORRECT for even question numbers; the reply to question 7 does not parse
    n = int(prompt.split("Predicted answer: answer ")[1].split()[0])
    return "maybe" if n == 7 else ("Correct." if n % 2 == 0 else "WRONG")


@pytest.fixture()
def scripted(monkeypatch):
    llm = ScriptedLLM(_script)
    monkeypatch.setattr(judged, "load_judge_llm", lambda model, sets: llm)
    return llm


def test_cli_judges_a_finished_run_and_resumes(tmp_path, scripted, capsys):
    run = _run(tmp_path)
    assert cli.main(["judge", str(run), "--runs", "2", "--n-resamples", "100"]) == 0
    out = capsys.readouterr().out
    assert "multi_hop: J 50.00 ± 0.00" in out and "1 of 16 unparsed" not in out and "2 of 16 unparsed" in out
    summary = json.loads((run / "judge_summary.json").read_text())
    assert summary["categories"]["adversarial"]["runs"] == [50.0, 50.0]  # q6 CORRECT, q7 unparsed -> WRONG
    assert summary["settings"]["runs"] == 2 and summary["n_questions"] == 8
    assert len((run / "judgements.jsonl").read_text().splitlines()) == 16
    assert len(scripted.prompts) == 16
    # a second call finds every label in place and judges nothing
    assert cli.main(["judge", str(run), "--runs", "2", "--n-resamples", "100"]) == 0
    assert len(scripted.prompts) == 16


def test_cli_judges_some_samples_into_another_folder(tmp_path, scripted):
    run = _run(tmp_path)
    assert cli.main(["judge", str(run), "--runs", "1", "--samples", "conv-1", "--out", str(tmp_path / "j")]) == 0
    assert (tmp_path / "j" / "judgements.jsonl").is_file() and not (run / "judgements.jsonl").exists()
    assert cli.main(["judge", str(run), "--samples", "conv-9"]) == 2


def test_cli_refuses_a_run_judged_by_another_judge(tmp_path, scripted, capsys):
    run = _run(tmp_path)
    assert cli.main(["judge", str(run), "--runs", "1"]) == 0
    assert cli.main(["judge", str(run), "--runs", "1", "--max-new-tokens", "4"]) == 2
    assert "another judge" in capsys.readouterr().err


def test_table1_shows_j_beside_f1_when_a_run_was_judged(tmp_path, scripted):
    run = _run(tmp_path)
    paper = PaperTable(PAPER_DIR / "table1.csv", "method")
    plain = build_table1(collect(tmp_path / "runs"), paper, n_resamples=50)
    assert "judge" not in plain.metrics and "J" not in to_markdown(plain).split("\n")[4]
    assert cli.main(["judge", str(run), "--runs", "1"]) == 0
    table = build_table1(collect(tmp_path / "runs"), paper, n_resamples=50)
    row = next(r for b in table.blocks for r in b.rows if r.key == "scgmem")
    assert row.cells["multi_hop_judge"].ours == pytest.approx(50.0)
    assert row.cells["adversarial_judge"].ours == pytest.approx(50.0)
    assert row.cells["average_judge"].ours == pytest.approx(50.0)
    assert row.cells["overall_weighted_judge"].ours == pytest.approx(50.0)
    md = to_markdown(table)
    assert "Multi-hop F1 | Multi-hop BLEU-1 | Multi-hop J" in md and "J: the LLM judge" in md
    assert "\\multicolumn{3}{c}{Multi-hop}" in to_latex(table)
