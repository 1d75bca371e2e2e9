"""Table 1 / Table 2 from fake run directories, checked against hand-computed values."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from scgmem.report import cli
from scgmem.report.collect import NoRunsError, collect, load_run, newest_sweep
from scgmem.report.paper import PaperTable
from scgmem.report.tables import average_ci, build_table1, build_table2
from scgmem.report.writers import to_latex, to_markdown, write_table
from scgmem.scoring.metrics import bootstrap_ci, paired_bootstrap
from tests.report import rec, rescored, write_run

ROOT = Path(__file__).resolve().parents[2]
PAPER_DIR = ROOT / "results" / "paper"

# Per-question F1 (= BLEU-1 unless given) of three methods on the same eight questions:
# two per category (1 multi-hop, 2 temporal, 4 single-hop, 5 adversarial).
QUESTIONS = [(0, 1), (1, 1), (2, 2), (3, 2), (4, 4), (5, 4), (6, 5), (7, 5)]  # (qa_index, category)
F1 = {
    "scgmem":       [1.0, 0.5, 0.5, 0.5, 1.0, 1.0, 0.0, 1.0],
    "amem":         [0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 1.0, 1.0],
    "full_context": [0.5, 0.0, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0],
}


def _records(method: str, bleu_scale: float = 1.0) -> list[dict]:
    return [rec("conv-1", i, c, f, f * bleu_scale) for (i, c), f in zip(QUESTIONS, F1[method])]


@pytest.fixture()
def table1_runs(tmp_path):
    sweep = tmp_path / "runs" / "multirun" / "2026-01-01_00-00-00"
    for method in F1:
        records = _records(method, bleu_scale=0.5)
        if method == "amem":
            records = records[::-1]  # a different order: pairing must go by (sample_id, qa_index)
        write_run(sweep / "qwen2.5-3b" / method / "x", model="qwen2.5-3b", method=method, records=records)
    return sweep


@pytest.fixture()
def paper_csv(tmp_path):
    """A paper table with known values: A-MEM row typed with an average, LoCoMo row without."""
    path = tmp_path / "table1.csv"
    cols = ["multi_hop", "temporal", "single_hop", "adversarial", "average"]
    header = ["model", "method"] + [f"{c}_{m}" for c in cols for m in ("f1", "bleu1")] + ["source"]
    rows = [["qwen2.5-3b", "full_context", 10, 5, 20, 10, 30, 15, 40, 20, "", "", "amem_t1"],
            ["qwen2.5-3b", "amem", 50, 25, 20, 10, 60, 30, 80, 40, 52.5, 26.25, "amem_t1"],
            ["qwen2.5-3b", "scgmem", 100, "", "", "", "", "", "", "", "", "", "scgmem_secondary"]]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return PaperTable(path, "method")


def _block(table, model="qwen2.5-3b"):
    return next(b for b in table.blocks if b.model == model)


def _row(block, key):
    return next(r for r in block.rows if r.key == key)


def test_cells_are_summary_means_with_bootstrap_cis(table1_runs, paper_csv):
    table = build_table1(collect(table1_runs), paper_csv, n_resamples=200)
    scg = _row(_block(table), "scgmem")
    # multi-hop: mean(1.0, 0.5) = 75%; BLEU-1 was written at half the F1.
    assert scg.cells["multi_hop_f1"].ours == pytest.approx(75.0)
    assert scg.cells["multi_hop_bleu1"].ours == pytest.approx(37.5)
    # temporal: both 0.5 -> a CI of zero width at 50.
    assert scg.cells["temporal_f1"].ci == pytest.approx((50.0, 50.0))
    # the CI is the metrics module's percentile bootstrap of the category's values.
    assert scg.cells["adversarial_f1"].ci == pytest.approx(bootstrap_ci([0.0, 100.0], 200, 0))
    # average = unweighted mean of the category means: (75 + 50 + 100 + 50) / 4.
    assert scg.cells["average_f1"].ours == pytest.approx(68.75)
    low, high = scg.cells["average_f1"].ci
    assert low <= 68.75 <= high
    assert scg.n == 8


def test_average_ci_resamples_within_categories():
    records = [rec("c", 0, 1, 0.2), rec("c", 1, 1, 0.2), rec("c", 2, 2, 1.0)]
    # Every resample keeps each category's size: constant categories give a point interval.
    assert average_ci(records, {1: "multi_hop", 2: "temporal"}, "f1") == pytest.approx((60.0, 60.0))
    records.append(rec("c", 3, 2, 0.0))  # temporal now {1, 0}: its mean is 0, 50 or 100
    low, high = average_ci(records, {1: "multi_hop", 2: "temporal"}, "f1", n_resamples=500)
    assert (low, high) == pytest.approx((10.0, 60.0))  # (20 + {0, 100}) / 2 at the 2.5/97.5% ends
    assert average_ci([], {1: "multi_hop"}, "f1") is None


def test_paper_values_differences_and_flags(table1_runs, paper_csv):
    table = build_table1(collect(table1_runs), paper_csv, n_resamples=50)
    block = _block(table)
    assert block.paper_model == "qwen2.5-3b"
    amem = _row(block, "amem")
    # ours multi-hop F1 = 50; paper 50 -> diff 0. Temporal: ours 25, paper 20 -> +5.
    assert amem.cells["multi_hop_f1"].diff == pytest.approx(0.0)
    assert amem.cells["temporal_f1"].paper == 20 and amem.cells["temporal_f1"].diff == pytest.approx(5.0)
    assert amem.cells["average_f1"].paper == 52.5 and amem.cells["average_f1"].paper_flag == ""
    # LoCoMo row: no average typed -> derived from its four categories (10 + 20 + 30 + 40) / 4.
    loc = _row(block, "full_context")
    assert loc.cells["average_f1"].paper == pytest.approx(25.0)
    assert loc.cells["average_f1"].paper_flag == "derived"
    assert _row(block, "scgmem").cells["multi_hop_f1"].paper_flag == "secondary"
    assert _row(block, "scgmem").cells["temporal_f1"].paper is None  # blank stays blank


def test_improvement_row_is_relative_to_the_strongest_baseline(table1_runs, paper_csv):
    table = build_table1(collect(table1_runs), paper_csv, n_resamples=50)
    imp = _row(_block(table), "improvement")
    # multi-hop F1: SCG-Mem 75, best baseline A-MEM 50 -> +50%.
    assert imp.cells["multi_hop_f1"].ours == pytest.approx(50.0)
    # adversarial F1: SCG-Mem 50, best A-MEM 100 -> -50%.
    assert imp.cells["adversarial_f1"].ours == pytest.approx(-50.0)
    # paper: SCG-Mem 100 vs max(LoCoMo 10, A-MEM 50) -> +100%; the paper's improvement is in percent.
    assert imp.cells["multi_hop_f1"].paper == pytest.approx(100.0)
    assert imp.cells["multi_hop_f1"].unit == "%"
    assert imp.cells["temporal_f1"].paper is None


def test_improvement_over_every_run_counts_the_rows_the_paper_does_not_have(table1_runs, paper_csv):
    """A RAG row above every paper baseline: the paper's Improvement row leaves it out (and says so
    in the legend); the row over every run counts it."""
    write_run(table1_runs / "qwen2.5-3b" / "rag_locomo" / "x", model="qwen2.5-3b", method="rag_locomo",
              records=[rec("conv-1", i, c, 1.0) for i, c in QUESTIONS])
    table = build_table1(collect(table1_runs), paper_csv, n_resamples=50)
    block = _block(table)
    assert _row(block, "improvement").cells["multi_hop_f1"].ours == pytest.approx(50.0)  # vs A-MEM's 50
    over_all = _row(block, "improvement_all")
    assert over_all.cells["multi_hop_f1"].ours == pytest.approx(-25.0)  # 75 vs the RAG's 100
    assert over_all.cells["multi_hop_f1"].paper is None and over_all.label == "Improvement over every run (%)"
    md = to_markdown(table)
    assert "leaves out RAG (LoCoMo retriever);" in md
    assert "| LoCoMo (full context) | ours |" in md


def test_paired_p_values_of_the_tables_are_two_sided(table1_runs, paper_csv):
    table = build_table1(collect(table1_runs), paper_csv, n_resamples=300)
    p = next(p for p in _block(table).paired if p["category"] == "adversarial" and p["metric"] == "f1")
    # SCG-Mem 0 and 1 against A-MEM 1 and 1: a - b is -100 or 0, never above 0. One-sided "a > b"
    # would print about 0.75 + 0.25 = 1; two-sided is twice the smaller tail (a - b >= 0: 1/4).
    assert p["b"] == "amem" and p["diff"] == pytest.approx(-50.0)
    assert p["p_value"] == pytest.approx(2 * 0.25, abs=0.1)
    assert "| p (two-sided) |" in to_markdown(table)


def test_paired_bootstrap_against_strongest_baseline_matches_by_question(table1_runs, paper_csv):
    table = build_table1(collect(table1_runs), paper_csv, n_resamples=300)
    paired = {(p["category"], p["metric"]): p for p in _block(table).paired}
    # single-hop: A-MEM (50) beats LoCoMo (25); SCG-Mem (100) - A-MEM on questions 4, 5.
    p = paired[("single_hop", "f1")]
    assert p["b"] == "amem" and p["n"] == 2 and p["unmatched"] == 0
    expected = paired_bootstrap([100.0, 100.0], [50.0, 50.0], n_resamples=300, seed=0)
    assert p["diff"] == pytest.approx(50.0) and p["ci_low"] == pytest.approx(expected["ci_low"])
    assert p["p_value"] == pytest.approx(0.0)
    # temporal: LoCoMo 25 vs A-MEM 25, a tie -> the first in the paper's row order (LoCoMo).
    assert paired[("temporal", "f1")]["b"] == "full_context"
    # BLEU-1 differences are half the F1 ones (BLEU-1 was written at half the F1).
    assert paired[("single_hop", "bleu1")]["diff"] == pytest.approx(25.0)


def test_unmatched_questions_are_left_out_and_counted(tmp_path, paper_csv):
    sweep = tmp_path / "sweep"
    write_run(sweep / "a", model="qwen2.5-3b", method="scgmem", records=_records("scgmem"))
    write_run(sweep / "b", model="qwen2.5-3b", method="amem", records=_records("amem")[:-1])  # misses qa 7
    table = build_table1(collect(sweep), paper_csv, n_resamples=50)
    adv = next(p for p in _block(table).paired if p["category"] == "adversarial" and p["metric"] == "f1")
    assert adv["n"] == 1 and adv["unmatched"] == 1
    assert adv["diff"] == pytest.approx(-100.0)  # question 6 only: SCG-Mem 0.0 against A-MEM 1.0


def test_model_without_paper_numbers_uses_the_fallback(tmp_path):
    write_run(tmp_path / "r", model="smollm2-135m", method="amem", records=_records("amem"))
    paper = PaperTable(PAPER_DIR / "table1.csv", "method")
    block = build_table1(collect(tmp_path), paper, n_resamples=20).blocks[0]
    assert block.paper_model == "llama3.2-1b"
    assert _row(block, "amem").cells["multi_hop_f1"].paper == 19.06  # A-MEM, Llama 3.2 1B, multi-hop F1
    none = build_table1(collect(tmp_path), paper, default_paper_model=None, n_resamples=20).blocks[0]
    assert none.paper_model is None and [r.key for r in none.rows] == ["amem"]


def test_a_served_paper_model_is_compared_with_its_own_paper_numbers(tmp_path):
    write_run(tmp_path / "r", model="qwen2.5-3b@vllm", method="amem", records=_records("amem"))
    paper = PaperTable(PAPER_DIR / "table1.csv", "method")
    block = build_table1(collect(tmp_path), paper, n_resamples=20).blocks[0]
    assert block.model == "qwen2.5-3b@vllm" and block.paper_model == "qwen2.5-3b"


def test_mixed_category_sets_are_refused(tmp_path, paper_csv):
    write_run(tmp_path / "a", model="m", method="amem", records=_records("amem"))
    write_run(tmp_path / "b", model="m", method="scgmem", records=[r for r in _records("scgmem") if r["category"] != 2],
              categories={1: "multi_hop", 4: "single_hop", 5: "adversarial"})
    with pytest.raises(ValueError, match="different categories"):
        build_table1(collect(tmp_path), paper_csv)


def test_table2_variants_and_ablation_pairs(tmp_path):
    sweep = tmp_path / "sweep"
    for constraint, evolution, method in ((True, True, "scgmem"), (False, True, "amem"), (True, False, "full_context")):
        write_run(sweep / f"{constraint}-{evolution}", model="qwen2.5-3b", method="scgmem", records=_records(method),
                  method_cfg={"constraint": constraint, "evolution": evolution})
    write_run(sweep / "other", model="qwen2.5-3b", method="amem", records=_records("amem"))  # ignored
    paper = PaperTable(PAPER_DIR / "table2.csv", "variant")
    table = build_table2(collect(sweep), paper, n_resamples=50)
    block = _block(table)
    assert [r.key for r in block.rows] == ["full", "no_constraint", "drop_no_constraint", "no_evolution",
                                           "drop_no_evolution"]
    assert _row(block, "no_constraint").cells["multi_hop_f1"].ours == pytest.approx(50.0)
    # Performance Drop: ours (50 - 75) / 75 = -33.3%; the paper's printed -39.5% (17.23 vs 28.49).
    drop = _row(block, "drop_no_constraint").cells["multi_hop_f1"]
    assert drop.ours == pytest.approx(-100 / 3) and drop.paper == -39.5 and drop.paper_flag == ""
    assert _row(block, "full").cells["average_f1"].paper == 41.48  # derived: Table 2 prints no average
    assert [p["b"] for p in block.paired[::8]] == ["no_constraint", "no_evolution"]  # the paper's row order
    pairs = {(p["b"], p["category"], p["metric"]): p for p in block.paired}
    # full (scgmem values) - no_evolution (full_context values), single-hop: 100 - 25.
    assert pairs[("no_evolution", "single_hop", "f1")]["diff"] == pytest.approx(75.0)
    assert pairs[("no_constraint", "adversarial", "f1")]["diff"] == pytest.approx(-50.0)


def test_writers(table1_runs, paper_csv, tmp_path):
    table = build_table1(collect(table1_runs), paper_csv, n_resamples=50)
    md = to_markdown(table)
    assert "### qwen2.5-3b" in md and "| A-MEM | ours | 50.00 [50.00, 50.00]" in md
    assert "| Improvement (%) | ours | +50.0%" in md
    assert "25.00† (Δ" in md  # derived paper average of the LoCoMo row, with ours − paper
    tex = to_latex(table)
    assert "\\toprule" in tex and "Improvement (\\%)" in tex and "+50.0\\%" in tex and "$^\\dagger$" in tex
    paths = write_table(table, tmp_path / "tables")
    assert [p.name for p in paths] == ["table1.md", "table1.csv", "table1_paired.csv", "table1.tex",
                                       "table1_cat5.csv"]
    rows = list(csv.DictReader(open(paths[1])))
    cell = next(r for r in rows if r["row"] == "amem" and r["category"] == "temporal" and r["metric"] == "f1")
    assert float(cell["ours"]) == pytest.approx(25.0) and float(cell["diff"]) == pytest.approx(5.0)
    assert len(list(csv.DictReader(open(paths[2])))) == 8  # 4 categories x 2 metrics


def test_paper_csvs_hold_the_typed_source():
    paper = PaperTable(PAPER_DIR / "table1.csv", "method")
    assert paper.models == ["qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b"]
    baseline_rows = [k for k, row in paper.rows.items() if row["source"] == "scgmem_t1+amem_t1"]
    assert len(baseline_rows) == 20  # 4 models x 5 baselines, every cell typed
    for key in baseline_rows:
        for col in ("multi_hop", "temporal", "open_domain", "single_hop", "adversarial", "average"):
            assert paper.value(*key, col, "f1") is not None and paper.value(*key, col, "bleu1") is not None
    assert paper.value("llama3.2-3b", "scgmem", "temporal", "f1").value == 49.35
    assert paper.value("qwen2.5-1.5b", "improvement", "adversarial", "bleu1").value == 57.7
    # Spot checks against A-MEM Table 1 (results/paper/README.md) and its known anomaly.
    assert paper.value("qwen2.5-3b", "amem", "multi_hop", "f1").value == 12.57
    assert paper.value("llama3.2-1b", "full_context", "adversarial", "bleu1").value == 48.27
    same = [paper.rows[(m, "readagent")] for m in ("qwen2.5-3b", "llama3.2-3b")]
    assert {k: v for k, v in same[0].items() if k != "model"} == {k: v for k, v in same[1].items() if k != "model"}
    cats = ["multi_hop", "temporal", "single_hop", "adversarial"]
    # The average the SCG-Mem paper quotes for A-MEM on Qwen2.5-3B (21.33) is the mean of the four.
    assert paper.value("qwen2.5-3b", "amem", "average", "f1", cats).value == 21.33  # 21.325, half-up
    table2 = PaperTable(PAPER_DIR / "table2.csv", "variant")
    assert set(k for _, k in table2.rows) == {"full", "no_constraint", "no_evolution", "drop_no_constraint",
                                              "drop_no_evolution"}
    assert table2.value("qwen2.5-3b", "drop_no_evolution", "temporal", "f1").value == -20.1


def test_collect_and_newest_sweep(tmp_path):
    base = tmp_path / "runs" / "multirun"
    for stamp, experiment in (("2026-01-01_00-00-00", "table1"), ("2026-01-02_00-00-00", "table1"),
                              ("2026-01-03_00-00-00", "fig3")):
        write_run(base / stamp / "m" / "amem" / "x", model="m", method="amem", records=_records("amem"),
                  overrides=[f"+experiment={experiment}", "method=amem"])
    (base / "2026-01-04_00-00-00").mkdir()  # an empty (crashed) sweep is skipped
    OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"task": ["+experiment=table1"]}}}),
                   base / "2026-01-04_00-00-00" / "multirun.yaml")
    assert newest_sweep(tmp_path / "runs", "table1").name == "2026-01-02_00-00-00"
    assert newest_sweep(tmp_path / "runs", "fig3").name == "2026-01-03_00-00-00"
    with pytest.raises(NoRunsError, match="table2"):
        newest_sweep(tmp_path / "runs", "table2")
    run = load_run(base / "2026-01-01_00-00-00" / "m" / "amem" / "x")
    assert run.model == "m" and run.category_mapping[5] == "adversarial" and len(run.records) == 8
    with pytest.raises(NoRunsError):
        collect(tmp_path / "nothing")


def test_cli_writes_tables_and_fails_cleanly(table1_runs, tmp_path, capsys):
    (table1_runs / "multirun.yaml").write_text("hydra:\n  overrides:\n    task: ['+experiment=table1']\n")
    out = tmp_path / "out"
    assert cli.main(["table1", "--runs-root", str(table1_runs.parents[1]), "--out", str(out),
                     "--paper", str(PAPER_DIR), "--n-resamples", "50"]) == 0
    for name in ("tables/table1.md", "tables/table1.csv", "tables/table1.tex", "figures/cost_vs_f1.png"):
        assert (out / name).is_file(), name
    md = (out / "tables" / "table1.md").read_text()
    assert "paper numbers: qwen2.5-3b" in md and "12.57" in md  # the real paper CSV, A-MEM on Qwen2.5-3B
    assert cli.main(["table2", "--runs-root", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "error: table2:" in capsys.readouterr().err


def test_text_from_configs_data_or_models_cannot_break_markdown_or_latex_tables():
    from scgmem.report.writers import _latex_escape, md_text

    hostile = "a|b\nc <script>x</script> 50% $x$ #1 {y} ~z^ back\\slash"
    cell = md_text(hostile)
    assert "\n" not in cell and "<script>" not in cell
    assert cell.count("|") == cell.count("\\|") == 1  # every pipe escaped: the row keeps its columns
    row = "| " + " | ".join([cell, "x"]) + " |"
    assert len([c for c in row.replace("\\|", "").split("|")]) == 4  # "", cell, "x", ""
    tex = _latex_escape(hostile)
    for raw, escaped in (("%", "\\%"), ("$", "\\$"), ("#", "\\#"), ("{", "\\{"), ("_", "\\_")):
        assert tex.count(raw) == tex.count(escaped) or raw in "{", (raw, tex)
    assert "\n" not in tex and "\\textbackslash{}" in tex and "\\textasciitilde{}" in tex


def test_category5_apart_is_in_the_markdown_and_its_own_csv(tmp_path, paper_csv):
    """Average 1-4 and the category-5 answer rates, computed from the records (runs written before
    summary.json had them show them too)."""
    records = _records("scgmem")
    traps = {6: "Not mentioned in the conversation or Paris", 7: "Paris"}  # both options; the trap exactly
    for r in records:
        if r["category"] == 5:
            r["prediction"], r["options"] = traps[r["qa_index"]], ["Not mentioned in the conversation", "Paris"]
    records = [rescored(r) for r in records]
    run = write_run(tmp_path / "runs" / "r", model="qwen2.5-3b", method="scgmem", records=records)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["average_1_4"]["f1"] == pytest.approx(75.0) and summary["category5"]["trap_exact_rate"] == 0.5
    for key in ("average_1_4", "category5"):  # as an older run: the report recomputes them
        summary.pop(key)
    (run / "summary.json").write_text(json.dumps(summary))
    table = build_table1(collect(tmp_path / "runs"), paper_csv, n_resamples=20)
    md = to_markdown(table)
    # scgmem's categories 1, 2, 4: F1 means 75, 50, 100 -> 75.00; category 5: one both-options answer, one trap.
    assert "| SCG-Mem | 75.00 [" in md and "| 2 | 50.0% | 50.0% | 50.0% | 100.0% |" in md
    rows = list(csv.DictReader(open(write_table(table, tmp_path / "tables")[4])))
    assert len(rows) == 1 and float(rows[0]["average_1_4_f1"]) == pytest.approx(75.0)
    assert rows[0]["categories_1_4"] == "1 2 4" and float(rows[0]["trap_repeat_rate"]) == 1.0
