"""Figure 3, Figure 4 and cost vs F1 from fake run directories: plotted numbers and files."""
from __future__ import annotations

import csv

import pytest

from scgmem.report import cli
from scgmem.report.collect import collect
from scgmem.report.figures import cost_data, cost_vs_f1, figure3, figure4, sweep_data
from scgmem.scoring.metrics import bootstrap_ci
from tests.report import rec, write_run

CATS = [1, 1, 2, 2, 4, 4, 5, 5]


def _sweep(root, setting, values, model="smollm2-135m", experiment="fig3"):
    """One scgmem run per value; question i of the run with value v scores (i % 2) * v / 100."""
    for v in values:
        records = [rec("conv-1", i, c, (i % 2) * v / 100) for i, c in enumerate(CATS)]
        write_run(root / model / "scgmem" / f"{setting}={v}", model=model, method="scgmem", records=records,
                  method_cfg={"k": 35, "hops": 1, setting: v}, overrides=[f"+experiment={experiment}"])


def _is_png(path):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_pdf(path):
    return path.read_bytes()[:5] == b"%PDF-"


def test_sweep_data_per_category_sorted_by_setting(tmp_path):
    _sweep(tmp_path, "k", [50, 5, 20])  # written out of order
    write_run(tmp_path / "other", model="smollm2-135m", method="amem",
              records=[rec("conv-1", 0, 1, 1.0)], method_cfg={"k": 10})  # not scgmem: left out
    data = sweep_data(collect(tmp_path), "k", n_resamples=100)
    s = data["smollm2-135m"]["multi_hop"]
    assert s["x"] == [5, 20, 50]
    # multi-hop questions 0 and 1 score 0 and v/100 -> mean v/2 percent.
    assert s["f1"] == pytest.approx([2.5, 10.0, 25.0])
    assert s["n"] == [2, 2, 2]
    assert s["f1_ci"][2] == pytest.approx(bootstrap_ci([0.0, 50.0], 100, 0))
    assert list(data["smollm2-135m"]) == ["multi_hop", "temporal", "single_hop", "adversarial", "average"]


def test_sweep_data_has_the_average_with_its_stratified_interval(tmp_path):
    """The Average panel (what the claims test): the summary's average and `average_ci`."""
    from scgmem.scoring.metrics import average_ci

    _sweep(tmp_path, "hops", [0, 2], experiment="fig4")
    data = sweep_data(collect(tmp_path), "hops", n_resamples=200)
    avg = data["smollm2-135m"]["average"]
    runs = sorted(collect(tmp_path), key=lambda r: r.setting("hops"))
    assert avg["x"] == [0, 2] and avg["n"] == [8, 8]
    assert avg["f1"] == pytest.approx([r.summary["average"]["f1"] for r in runs])
    assert avg["f1_ci"][1] == pytest.approx(average_ci(runs[1].records, runs[1].category_mapping, "f1", n_resamples=200))
    low, high = avg["f1_ci"][1]
    assert low < avg["f1"][1] < high


def test_sweep_without_runs_of_the_setting_fails(tmp_path):
    write_run(tmp_path / "r", model="m", method="amem", records=[rec("conv-1", 0, 1, 1.0)])
    with pytest.raises(ValueError, match="method.hops"):
        sweep_data(collect(tmp_path), "hops")


def test_figure3_and_figure4_files(tmp_path):
    _sweep(tmp_path / "k", "k", [5, 10, 15])
    _sweep(tmp_path / "k", "k", [5, 10], model="qwen2.5-3b")  # two models on one figure
    _sweep(tmp_path / "h", "hops", [0, 1, 2], experiment="fig4")
    out = tmp_path / "figures"
    paths3 = figure3(collect(tmp_path / "k"), out, n_resamples=50)
    paths4 = figure4(collect(tmp_path / "h"), out, n_resamples=50)
    assert [p.name for p in paths3] == ["fig3.png", "fig3.pdf", "fig3.csv"]
    assert [p.name for p in paths4] == ["fig4.png", "fig4.pdf", "fig4.csv"]
    for png, pdf in ((paths3[0], paths3[1]), (paths4[0], paths4[1])):
        assert _is_png(png) and _is_pdf(pdf)
    rows = list(csv.DictReader(open(paths4[2])))
    assert len(rows) == 3 * 5  # three hop values x (four categories + the average)
    row = next(r for r in rows if r["category"] == "single_hop" and r["hops"] == "2")
    assert float(row["f1"]) == pytest.approx(1.0)  # questions 4, 5 score 0 and 0.02 -> 1%
    rows3 = list(csv.DictReader(open(paths3[2])))
    assert {r["model"] for r in rows3} == {"smollm2-135m", "qwen2.5-3b"} and len(rows3) == (3 + 2) * 5


def test_pdf_is_reproducible(tmp_path):
    _sweep(tmp_path / "h", "hops", [0, 1], experiment="fig4")
    runs = collect(tmp_path / "h")
    a = figure4(runs, tmp_path / "a", n_resamples=20)[1].read_bytes()
    b = figure4(runs, tmp_path / "b", n_resamples=20)[1].read_bytes()
    assert a == b  # no creation date in the PDF: committed figures diff only when numbers change


def test_cost_data_and_chart(tmp_path):
    records = [rec("conv-1", i, c, 0.5) for i, c in enumerate(CATS)]
    tokens = {"ingest": {"calls": 3, "prompt_tokens": 1000, "generated_tokens": 200},
              "recall": {"calls": 8, "prompt_tokens": 400, "generated_tokens": 40},
              "answer": {"calls": 8, "prompt_tokens": 800, "generated_tokens": 160, "truncated_prompts": 0}}
    write_run(tmp_path / "a", model="m", method="scgmem", records=records, tokens=tokens, timing=(30.0, 10.0))
    write_run(tmp_path / "b", model="m", method="full_context", records=records, timing=(0.0, 8.0))
    rows = {r["method"]: r for r in cost_data(collect(tmp_path), n_resamples=100)}
    # (1000 + 200 + 400 + 40 + 800 + 160) / 8 questions; truncated_prompts is not a token count.
    assert rows["scgmem"]["tokens_per_question"] == pytest.approx(2600 / 8)
    assert rows["scgmem"]["seconds_per_question"] == pytest.approx(40.0 / 8)
    assert rows["full_context"]["tokens_per_question"] == pytest.approx(110.0)  # write_run's default usage
    assert rows["scgmem"]["f1"] == pytest.approx(50.0)
    # every point carries its 95% interval and a label that tells the two "LoCoMo"s apart
    assert rows["scgmem"]["f1_ci_low"] <= 50.0 <= rows["scgmem"]["f1_ci_high"]
    assert rows["scgmem"]["label"] == "SCG-Mem (k=35, hops=1)"
    assert rows["full_context"]["label"] == "full context (LoCoMo)"
    paths = cost_vs_f1(collect(tmp_path), tmp_path / "fig", n_resamples=100)
    assert _is_png(paths[0]) and _is_pdf(paths[1])


def test_cost_per_question_of_a_run_resumed_before_usage_jsonl(tmp_path):
    # Recall/answer counts cover only the 4 records the last attempt wrote; the ingest covers all 8.
    import json

    from scgmem.report.costs import cost_row

    records = [rec("conv-1", i, c, 0.5) for i, c in enumerate(CATS)]
    tokens = {"ingest": {"calls": 8, "prompt_tokens": 800, "generated_tokens": 0},
              "answer": {"calls": 4, "prompt_tokens": 400, "generated_tokens": 0}}
    run_dir = write_run(tmp_path / "a", model="m", method="memgpt", records=records, tokens=tokens)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tokens_questions"] == 8  # a run without usage.jsonl: its own records
    summary["tokens_questions"] = 4
    (run_dir / "summary.json").write_text(json.dumps(summary))
    [run] = collect(tmp_path)
    assert cost_data([run], n_resamples=20)[0]["tokens_per_question"] == pytest.approx(800 / 8 + 400 / 4)
    assert cost_row(run)["tokens_per_question"] == pytest.approx(400 / 4)
    assert cost_row(run)["calls_per_question"] == pytest.approx(1.0)


def test_cli_figures(tmp_path):
    base = tmp_path / "runs" / "multirun"
    _sweep(base / "2026-01-01_00-00-00", "k", [5, 10])
    _sweep(base / "2026-01-02_00-00-00", "hops", [0, 1, 2], experiment="fig4")
    out = tmp_path / "out"
    assert cli.main(["all", "--runs-root", str(tmp_path / "runs"), "--out", str(out), "--n-resamples", "20"]) == 0
    assert (out / "figures" / "fig3.png").is_file() and (out / "figures" / "fig4.pdf").is_file()
    assert not (out / "tables" / "table1.md").exists()  # no table1 sweep: skipped, not an error


def test_point_labels_do_not_overlap_and_log_axes_label_no_minor_ticks():
    """Methods with nearly equal cost and F1 (SCG-Mem beside MemoryBank, MemGPT beside A-MEM on
    the embedded model) get labels that do not cover each other; a log axis spanning less than
    a decade leaves its minor ticks unlabelled."""
    from matplotlib.figure import Figure

    from scgmem.report.figures import _log_axis, _place_labels

    fig = Figure(figsize=(4.5, 3.6))
    ax = fig.subplots()
    points = [(1500, 16.3, "SCG-Mem"), (1560, 16.1, "MemoryBank"), (1530, 16.2, "MemGPT"), (1100, 13.2, "A-MEM")]
    ax.scatter([p[0] for p in points], [p[1] for p in points])
    ax.set_xscale("log")
    _log_axis(ax.xaxis)
    _place_labels(ax, points)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == 4
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    minor = [t.get_text() for t in ax.xaxis.get_minorticklabels()]
    assert not any(minor), minor


def test_a_category_missing_from_some_runs_is_a_gap_and_one_missing_from_all_is_left_out(tmp_path, capsys):
    """Runs on a slice without a category (data.questions_per_category on fewer conversations):
    temporal is missing from the hops=1 run only, adversarial from every run. The missing point is
    None (no bar, empty CSV cells), not a TypeError from matplotlib; adversarial gets no panel, no
    CSV row, and a note."""
    for v in (0, 1, 2):
        cats = [1, 1, 4, 4] if v == 1 else [1, 1, 2, 2, 4, 4]
        write_run(tmp_path / "h" / f"hops={v}", model="m", method="scgmem", overrides=["+experiment=fig4"],
                  records=[rec("conv-1", i, c, (i % 2) * 0.5) for i, c in enumerate(cats)],
                  method_cfg={"k": 35, "hops": v})
        write_run(tmp_path / "k" / f"k={v + 5}", model="m", method="scgmem", overrides=["+experiment=fig3"],
                  records=[rec("conv-1", i, c, (i % 2) * 0.5) for i, c in enumerate(cats)],
                  method_cfg={"k": v + 5, "hops": 1})
    data = sweep_data(collect(tmp_path / "h"), "hops", n_resamples=20)
    assert list(data["m"]) == ["multi_hop", "temporal", "single_hop", "average"]
    assert data["m"]["temporal"]["f1"] == [25.0, None, 25.0] and data["m"]["temporal"]["n"] == [2, 0, 2]
    for figure, sub, setting in ((figure4, "h", "hops"), (figure3, "k", "k")):
        paths = figure(collect(tmp_path / sub), tmp_path / "out", n_resamples=20)
        assert _is_png(paths[0]) and _is_pdf(paths[1])
        rows = list(csv.DictReader(open(paths[2])))
        assert {r["category"] for r in rows} == {"multi_hop", "temporal", "single_hop", "average"}
        gap = next(r for r in rows if r["category"] == "temporal" and r[setting] == ("1" if sub == "h" else "6"))
        assert gap["n"] == "0" and gap["f1"] == gap["f1_ci_low"] == gap["bleu1"] == ""
        assert "category adversarial; left out" in capsys.readouterr().err
