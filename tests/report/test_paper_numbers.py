"""results/paper/*.csv against the paper's text, and the arithmetic of its printed relative rows."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from scgmem.report.collect import collect
from scgmem.report.paper import PaperTable
from scgmem.report.tables import build_table1
from scgmem.report.writers import to_markdown
from tests.report import rec, write_run

ROOT = Path(__file__).resolve().parents[2]
PAPER_DIR = ROOT / "results" / "paper"
PAPER_TEXT = ROOT.parent / "shared" / "paper" / "scgmem-paper.txt"  # beside the project on our machines
MODELS = {"Qwen2.5 1.5B": "qwen2.5-1.5b", "Qwen2.5 3B": "qwen2.5-3b", "Llama 3.2 1B": "llama3.2-1b",
          "Llama 3.2 3B": "llama3.2-3b"}
METHODS = {"LoCoMo": "full_context", "ReadAgent": "readagent", "MemoryBank": "memorybank", "MemGPT": "memgpt",
           "A-MEM": "amem", "SCG-Mem (Ours)": "scgmem"}
VARIANTS = {"SCG-Mem (Full)": "full", "w/o Cognitive Constraint": "no_constraint",
            "w/o Evolutionary Update": "no_evolution"}
T1_COLS = [f"{c}_{m}" for c in ("multi_hop", "temporal", "single_hop", "adversarial", "average") for m in ("f1", "bleu1")]
T2_COLS = T1_COLS[:8]
CATS = ["multi_hop", "temporal", "single_hop", "adversarial"]


def _printed_tables(text: str) -> tuple[dict, dict]:
    """{(model, row): [printed strings]} of Tables 1 and 2, from the paper's tab-separated rows."""
    t1, t2, model, last = {}, {}, None, None
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) == 12:  # Table 1: model, method, 10 values
            model = MODELS.get(f[0], model)
            if f[1] in METHODS:
                t1[(model, METHODS[f[1]])] = f[2:]
            elif f[0].startswith("Improvement"):
                t1[(model, "improvement")] = f[2:]
        elif len(f) == 9 and (f[0] in VARIANTS or f[0].startswith("Performance Drop")):
            last = VARIANTS.get(f[0], last)
            t2[("qwen2.5-3b", last if f[0] in VARIANTS else f"drop_{last}")] = f[1:]
    return t1, t2


def _number(printed: str) -> float:
    return float(printed.replace("%", "").replace("+", ""))


@pytest.mark.skipif(not PAPER_TEXT.is_file(), reason=f"the paper's text is not at {PAPER_TEXT}")
def test_csvs_hold_every_printed_number_of_both_tables():
    t1, t2 = _printed_tables(PAPER_TEXT.read_text(encoding="utf-8"))
    assert len(t1) == 4 * 7 and len(t2) == 5  # 4 models x (6 methods + Improvement); 3 rows + 2 drops
    for printed, path, key, cols in ((t1, "table1.csv", "method", T1_COLS), (t2, "table2.csv", "variant", T2_COLS)):
        paper = PaperTable(PAPER_DIR / path, key)
        assert set(paper.rows) == set(printed), path
        for ident, values in printed.items():
            typed = [_number(paper.rows[ident][c]) for c in cols]
            assert typed == [_number(v) for v in values], (path, ident)


def _half_up(x: Decimal, places: str) -> Decimal:
    return x.quantize(Decimal(places), rounding=ROUND_HALF_UP)


def _d(paper: PaperTable, ident, col) -> Decimal:
    return Decimal(paper.rows[ident][col])


def test_printed_averages_are_the_unweighted_category_means():
    paper = PaperTable(PAPER_DIR / "table1.csv", "method")
    rows = [k for k in paper.rows if k[1] != "improvement"]
    assert len(rows) == 24
    for ident in rows:
        for metric in ("f1", "bleu1"):
            mean = sum(_d(paper, ident, f"{c}_{metric}") for c in CATS) / 4
            assert _half_up(mean, "0.01") == _d(paper, ident, f"average_{metric}"), ident
            # The report's derivation (used where no average is printed) gives the same value.
            derived = PaperTable.value(paper, *ident, "average", metric, CATS)
            assert derived.value == float(_d(paper, ident, f"average_{metric}"))


def test_printed_improvements_recomputed_one_is_rounded_down():
    """Improvement = (SCG-Mem - best baseline) / best baseline; the best is A-MEM in all 40 columns.
    39 of 40 printed values are the recomputed ones rounded half-up to one decimal; Qwen2.5-3B
    multi-hop F1 is printed +126.6%, while (28.49 - 12.57) / 12.57 = +126.65...%, i.e. +126.7%."""
    paper = PaperTable(PAPER_DIR / "table1.csv", "method")
    baselines = ["full_context", "readagent", "memorybank", "memgpt", "amem"]
    mismatches = []
    for model in paper.models:
        for col in T1_COLS:
            best = max(baselines, key=lambda b: _d(paper, (model, b), col))
            assert best == "amem"
            rel = 100 * (_d(paper, (model, "scgmem"), col) - _d(paper, (model, best), col)) / _d(paper, (model, best), col)
            if _half_up(rel, "0.1") != _d(paper, (model, "improvement"), col):
                mismatches.append((model, col, str(_d(paper, (model, "improvement"), col)), str(_half_up(rel, "0.001"))))
    assert mismatches == [("qwen2.5-3b", "multi_hop_f1", "126.6", "126.651")]


def test_printed_performance_drops_match_their_rows():
    paper = PaperTable(PAPER_DIR / "table2.csv", "variant")
    full = ("qwen2.5-3b", "full")
    for variant in ("no_constraint", "no_evolution"):
        for col in T2_COLS:
            rel = 100 * (_d(paper, ("qwen2.5-3b", variant), col) - _d(paper, full, col)) / _d(paper, full, col)
            assert _half_up(rel, "0.1") == _d(paper, ("qwen2.5-3b", f"drop_{variant}"), col), (variant, col)
    # Table 2's full row is Table 1's SCG-Mem row on Qwen2.5-3B.
    table1 = PaperTable(PAPER_DIR / "table1.csv", "method")
    assert all(_d(paper, full, c) == _d(table1, ("qwen2.5-3b", "scgmem"), c) for c in T2_COLS)


def test_report_shows_scgmem_paper_numbers_and_flags_the_improvement_mismatch(tmp_path):
    records = [rec("c", i, cat, 0.5) for i, cat in enumerate((1, 2, 4, 5))]
    for method in ("scgmem", "amem"):
        write_run(tmp_path / method, model="qwen2.5-3b", method=method, records=records)
    table = build_table1(collect(tmp_path), PaperTable(PAPER_DIR / "table1.csv", "method"), n_resamples=20)
    rows = {r.key: r for r in table.blocks[0].rows}
    assert rows["scgmem"].cells["multi_hop_f1"].paper == 28.49
    assert rows["scgmem"].cells["average_bleu1"].paper == 33.46
    imp = rows["improvement"].cells
    assert imp["multi_hop_f1"].paper == 126.6 and imp["multi_hop_f1"].paper_flag == "mismatch"
    assert imp["single_hop_f1"].paper == 146.7 and imp["single_hop_f1"].paper_flag == ""
    assert imp["single_hop_f1"].ours == pytest.approx(0.0)  # ours: SCG-Mem and A-MEM both 50


def test_report_prints_the_weighted_overall_beside_the_unweighted_average(tmp_path):
    # Three multi-hop questions right, one wrong in each other category.
    records = [rec("c", i, cat, f) for i, (cat, f) in enumerate([(1, 1.0), (1, 1.0), (1, 1.0), (2, 0.0), (4, 0.0),
                                                                   (5, 0.0)])]
    write_run(tmp_path / "r", model="qwen2.5-3b", method="scgmem", records=records)
    table = build_table1(collect(tmp_path), PaperTable(PAPER_DIR / "table1.csv", "method"), n_resamples=20)
    scg = next(r for r in table.blocks[0].rows if r.key == "scgmem")
    assert scg.cells["average_f1"].ours == pytest.approx(25.0)  # (100 + 0 + 0 + 0) / 4
    assert scg.cells["overall_weighted_f1"].ours == pytest.approx(50.0)  # 3 of 6 questions
    assert scg.cells["overall_weighted_f1"].paper is None  # the paper prints no such column
    md = to_markdown(table)
    assert "Overall (weighted) F1" in md and "LoCoMo's Overall" in md


def test_report_notes_the_scoring_of_its_runs(tmp_path):
    from scgmem.report import cli

    import json

    old = write_run(tmp_path / "runs" / "old", model="qwen2.5-3b", method="amem", records=[rec("c", 0, 1, 1.0)])
    new = write_run(tmp_path / "runs" / "new", model="qwen2.5-3b", method="scgmem", records=[rec("c", 0, 1, 1.0)])
    for run, fmt in ((old, None), (new, {"format": "json", "n": 1, "unparsed": 0})):
        summary = json.loads((run / "summary.json").read_text())
        summary.pop("answer_format")  # a summary from before the option existed
        if fmt:
            summary["answer_format"] = fmt
        (run / "summary.json").write_text(json.dumps(summary))
    assert cli.main(["table1", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
                     "--paper", str(PAPER_DIR), "--n-resamples", "10"]) == 0
    md = (tmp_path / "out" / "tables" / "table1.md").read_text()
    assert "Scoring: protocol=amem, answer_format=json; protocol=amem, answer_format=text." in md
