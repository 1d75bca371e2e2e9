"""Figure 3 (scores vs k), Figure 4 (scores by association hops) and cost vs F1, from finished runs.

Figures 3 and 4 of the paper (Section 4.4, hyperparameter analysis): one panel per category and
one for the Average (the unweighted mean of the category means, which the claims test), F1 and
BLEU-1 (percent) of SCG-Mem against the swept setting. Every point carries its 95% interval:
Figure 3 draws it as a shaded band, Figure 4 as whiskers on the bars (a percentile bootstrap over
questions, `scgmem.scoring.metrics.category_cis`; for the Average, `average_ci`, which resamples
within each category). The paper's own optimum is drawn as the paper's (a dotted line, a tick
label), never as a finding of these runs; whether the runs support it is `scgmem-report claims`.

The cost chart puts every run's average F1, with its 95% interval, against what it cost: LLM
tokens per question (ingest shared over the questions; recall and answer over the answers the
counts cover, `scgmem.report.costs.question_costs`) and seconds per question (ingest + answer;
ingest counts even when the memory came from the cache, since it is the memory's cost).

Plotting uses matplotlib's object API on an Agg canvas (no pyplot state, no display), and the
`*_data` functions hold every plotted number so tests can check them without pixels.
"""
from __future__ import annotations

import csv
import logging
import math
import sys
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from scgmem.report.output import open_output
from scgmem.report.collect import Run, index_runs
from scgmem.report.costs import RECORDS, question_costs
from scgmem.report.paired import N_RESAMPLES
from scgmem.report.paper import CATEGORY_TITLES, FULL_SETTINGS, METRIC_TITLES, METRICS, run_title
from scgmem.report.writers import csv_cell
from scgmem.scoring.metrics import average_ci, category_cis

log = logging.getLogger(__name__)

# The paper's optima (Figures 3 and 4 of the paper; configs/method/scgmem.yaml), drawn as the paper's.
PAPER_OPTIMUM = {"k": FULL_SETTINGS["k"], "hops": FULL_SETTINGS["hops"]}
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")
AVERAGE = "average"
CI_NOTE = "95% bootstrap CI over questions"


def sweep_data(runs: list[Run], setting: str, *, n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict:
    """Scores of SCG-Mem runs against one method setting ("k" or "hops"), per model and category,
    the Average last.

    Returns {model: {category | "average": {"x": [...], "f1": [...], "f1_ci": [(lo, hi) | None],
    "bleu1": [...], "bleu1_ci": [...], "n": [...]}}}, x ascending. Runs of other methods, or
    without the setting, are left out (logged). A category a run has no question of (a slice
    without it) is None at that point: a gap in the figure, empty CSV cells (`_drop_empty` leaves
    out one that no run has a question of).
    """
    kept = []
    for run in runs:
        if run.method != "scgmem" or run.setting(setting) is None:
            log.warning("%s: no method.%s (method %s); left out of the %s sweep", run.run_dir, setting,
                        run.method, setting)
            continue
        kept.append(run)
    if not kept:
        raise ValueError(f"no scgmem run with a method.{setting} setting among {len(runs)} runs")
    out: dict = {}
    for (model, x), run in sorted(index_runs(kept, lambda r: (r.model, int(r.setting(setting)))).items()):
        mapping = {num: name for num, name in run.category_mapping.items() if name in run.categories}
        cis = category_cis(run.records, mapping, n_resamples=n_resamples, seed=seed)
        scored = sum(int(run.summary["categories"][cat]["n"]) for cat in run.categories)
        for cat in [*run.categories, AVERAGE]:
            series = out.setdefault(model, {}).setdefault(cat, {"x": [], "n": [], **{m: [] for m in METRICS},
                                                                **{f"{m}_ci": [] for m in METRICS}})
            series["x"].append(x)
            series["n"].append(scored if cat == AVERAGE else run.summary["categories"][cat]["n"])
            for metric in METRICS:
                if cat == AVERAGE:
                    series[metric].append(run.summary["average"][metric])
                    ci = average_ci(run.records, mapping, metric, n_resamples=n_resamples, seed=seed)
                else:
                    series[metric].append(run.summary["categories"][cat][metric])
                    ci = (cis.get(cat) or {}).get(metric)
                series[f"{metric}_ci"].append(tuple(ci) if ci else None)
    return _drop_empty(out, setting)


def _drop_empty(data: dict, setting: str) -> dict:
    """`data` without the categories no run of the sweep scored (every value None): a panel of
    nothing would read as a measured zero. Each one left out is a printed note on stderr (stdout
    carries the written paths)."""
    categories = dict.fromkeys(cat for per_cat in data.values() for cat in per_cat if cat != AVERAGE)
    for cat in categories:
        if all(v is None for per_cat in data.values() for m in METRICS for v in per_cat.get(cat, {}).get(m, [])):
            print(f"note: {setting} sweep: no run has a scored question of category {cat}; "
                  "left out of the figure and its CSV", file=sys.stderr)
            for per_cat in data.values():
                per_cat.pop(cat, None)
    return data


def cost_data(runs: list[Run], *, n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[dict]:
    """Per run: model, method, its label, average F1 with its 95% CI, BLEU-1, tokens and seconds per
    question, and how the tokens were counted (`tokens_basis`: a lower bound when the summary's
    counts do not cover the records; `question_costs`)."""
    out = []
    for (model, method), run in index_runs(runs, lambda r: (r.model, r.method)).items():
        n = run.summary.get("n_questions") or 0
        if not n:
            continue
        ingest = (run.summary.get("tokens") or {}).get("ingest") or {}
        ingest_tokens = int(ingest.get("prompt_tokens", 0)) + int(ingest.get("generated_tokens", 0))
        asked = question_costs(run)
        per_question = None if asked["tokens_per_question"] is None else ingest_tokens / n + asked["tokens_per_question"]
        timing = run.summary.get("timing") or {}
        seconds = float(timing.get("ingest_s") or 0.0) + float(timing.get("answer_s") or 0.0)
        mapping = {num: name for num, name in run.category_mapping.items() if name in run.categories}
        ci = average_ci(run.records, mapping, "f1", n_resamples=n_resamples, seed=seed) or (None, None)
        out.append({"model": model, "method": method, "label": run_title(method, run.setting),
                    "f1": run.summary["average"]["f1"], "f1_ci_low": ci[0], "f1_ci_high": ci[1],
                    "bleu1": run.summary["average"]["bleu1"], "tokens_per_question": per_question,
                    "tokens_basis": asked["tokens_basis"], "seconds_per_question": seconds / n, "n_questions": n})
    return out


def _save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
    with open_output(paths[0], binary=True) as f:
        fig.savefig(f, format="png", dpi=150, bbox_inches="tight")
    # No creation date: the same runs give the same file (committed figures diff cleanly).
    with open_output(paths[1], binary=True) as f:
        fig.savefig(f, format="pdf", bbox_inches="tight", metadata={"CreationDate": None})
    return paths


def _write_csv(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_output(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["empty"])
        writer.writeheader()
        writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)  # labels are text
    return path


def _nan(values: list[float | None]) -> list[float]:
    """Values to plot: a missing one (a category the run has no question of) as NaN, which
    matplotlib leaves out (a gap in a line, no bar) instead of failing on None."""
    return [math.nan if v is None else v for v in values]


def _errors(values: list[float | None], cis: list) -> list[list[float]]:
    """matplotlib yerr (2, n): distances from the value down and up to the CI ends."""
    low = [0.0 if v is None or ci is None else v - ci[0] for v, ci in zip(values, cis)]
    high = [0.0 if v is None or ci is None else ci[1] - v for v, ci in zip(values, cis)]
    return [low, high]


def _color(model_index: int, metric_index: int, n_models: int) -> str:
    """One colour per metric for one model; one colour per model (metric by line/hatch) for several."""
    return COLORS[(metric_index if n_models == 1 else model_index) % len(COLORS)]


def _panels(data: dict) -> tuple[Figure, list, list[str]]:
    categories = list(dict.fromkeys(c for per_model in data.values() for c in per_model))
    fig = Figure(figsize=(3.3 * len(categories), 3.6), layout="constrained")
    axes = fig.subplots(1, len(categories), squeeze=False)[0]
    return fig, list(axes), categories


def _panel_title(cat: str) -> str:
    return "Average (what the claims test)" if cat == AVERAGE else CATEGORY_TITLES.get(cat, cat)


def _sweep_rows(data: dict, setting: str) -> list[dict]:
    rows = []
    for model, per_cat in data.items():
        for cat, s in per_cat.items():
            for i, x in enumerate(s["x"]):
                row = {"model": model, "category": cat, setting: x, "n": s["n"][i]}
                for m in METRICS:
                    ci = s[f"{m}_ci"][i]
                    row.update({m: s[m][i], f"{m}_ci_low": ci[0] if ci else None, f"{m}_ci_high": ci[1] if ci else None})
                rows.append(row)
    return rows


def _finish_sweep(fig: Figure, axes: list, title: str, data: dict, setting: str, stem_path: Path) -> list[Path]:
    """Label and title a sweep figure; write it (png, pdf) and its points (csv) as `stem_path`.*."""
    axes[0].set_ylabel("score (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=9, wrap=True)
    return (_save(fig, stem_path.parent, stem_path.name)
            + [_write_csv(stem_path.with_suffix(".csv"), _sweep_rows(data, setting))])


def _label(metric: str, model: str, n_models: int) -> str:
    return METRIC_TITLES[metric] + (f" ({model})" if n_models > 1 else "")


def figure3(runs: list[Run], out_dir: str | Path, *, n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[Path]:
    """Figure 3: F1 and BLEU-1 against k with 95% CI bands, one panel per category and one for the
    Average. Writes fig3.png/.pdf/.csv."""
    data = sweep_data(runs, "k", n_resamples=n_resamples, seed=seed)
    fig, axes, categories = _panels(data)
    for ax, cat in zip(axes, categories):
        for i, (model, per_cat) in enumerate(data.items()):
            s = per_cat.get(cat)
            if s is None:
                continue
            for j, (metric, style) in enumerate(zip(METRICS, ("-o", "--s"))):
                color = _color(i, j, len(data))
                ax.plot(s["x"], _nan(s[metric]), style, color=color, markersize=4, label=_label(metric, model, len(data)))
                band = [(x, ci) for x, ci in zip(s["x"], s[f"{metric}_ci"]) if ci is not None]
                if band:
                    ax.fill_between([x for x, _ in band], [ci[0] for _, ci in band], [ci[1] for _, ci in band],
                                    color=color, alpha=0.15, linewidth=0)
        ax.axvline(PAPER_OPTIMUM["k"], color="0.4", linestyle=":", linewidth=1,
                   label=f"the paper's optimum (k = {PAPER_OPTIMUM['k']})")
        ax.set_title(_panel_title(cat), fontsize=9)
        ax.set_xlabel("k (concepts recalled)")
        ax.grid(alpha=0.3)
    title = (f"Figure 3 on {', '.join(data)}: SCG-Mem's F1 and BLEU-1 against k; shaded: each run's {CI_NOTE} "
             "(differences between settings are tested paired: scgmem-report claims); dotted: the optimum the paper "
             "reports for its models, not a finding of these runs")
    return _finish_sweep(fig, axes, title, data, "k", Path(out_dir) / "fig3")


def figure4(runs: list[Run], out_dir: str | Path, *, n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[Path]:
    """Figure 4: bars of F1 and BLEU-1 by association hops with 95% CI whiskers, one panel per
    category and one for the Average. Writes fig4.png/.pdf/.csv."""
    data = sweep_data(runs, "hops", n_resamples=n_resamples, seed=seed)
    fig, axes, categories = _panels(data)
    series = [(model, metric) for model in data for metric in METRICS]
    width = 0.8 / len(series)
    for ax, cat in zip(axes, categories):
        hops_seen: set[int] = set()
        for j, (model, metric) in enumerate(series):
            s = data[model].get(cat)
            if s is None:
                continue
            hops_seen.update(s["x"])
            xs = [x - 0.4 + width * (j + 0.5) for x in s["x"]]
            color = _color(j // len(METRICS), j % len(METRICS), len(data))
            ax.bar(xs, _nan(s[metric]), width=width, yerr=_errors(s[metric], s[f"{metric}_ci"]), capsize=2, color=color,
                   ecolor="0.2", error_kw={"linewidth": 0.8}, hatch="" if metric == "f1" else "//",
                   label=_label(metric, model, len(data)))
        ticks = sorted(hops_seen)
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{h}\n(paper's optimum)" if h == PAPER_OPTIMUM["hops"] else str(h) for h in ticks],
                           fontsize=8)
        ax.set_title(_panel_title(cat), fontsize=9)
        ax.set_xlabel("association hops")
        ax.grid(axis="y", alpha=0.3)
    title = (f"Figure 4 on {', '.join(data)}: SCG-Mem by association hops; whiskers: each run's {CI_NOTE} "
             "(differences between settings are tested paired: scgmem-report claims); the paper reports its "
             f"optimum at {PAPER_OPTIMUM['hops']} hop for its models, not a finding of these runs")
    return _finish_sweep(fig, axes, title, data, "hops", Path(out_dir) / "fig4")


def _log_axis(axis) -> None:
    """A log axis with labels at 1, 2 and 5 per decade and unlabelled minor ticks: over less than
    a decade matplotlib labels the minor ticks too, and their labels run into each other."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


# Where a point's label may go, in points from the point, tried in this order.
_LABEL_OFFSETS = ((4, 3), (4, -9), (-4, 3), (-4, -9), (0, 8), (0, -13), (8, 10), (8, -16), (-8, 10), (-8, -16))


def _place_labels(ax, points: list[tuple[float, float, str]], fontsize: float = 7) -> None:
    """Annotate each (x, y, text) where its label overlaps no label placed before and no point,
    estimating each label's box from its length (the first offset if none is free)."""
    ax.autoscale_view()
    to_px = ax.figure.dpi / 72.0
    width_px, height_px = 0.6 * fontsize * to_px, 1.2 * fontsize * to_px  # one character's box
    xy = [tuple(ax.transData.transform((x, y))) for x, y, _ in points]
    boxes: list[tuple[float, float, float, float]] = [(px - 4, py - 4, px + 4, py + 4) for px, py in xy]
    for (x, y, text), (px, py) in sorted(zip(points, xy), key=lambda item: -item[1][1]):
        w, h = width_px * len(text), height_px
        chosen = _LABEL_OFFSETS[0]
        for dx, dy in _LABEL_OFFSETS:
            left = px + dx * to_px - (w if dx < 0 else w / 2 if dx == 0 else 0)
            bottom = py + dy * to_px
            box = (left, bottom, left + w, bottom + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes):
                chosen = (dx, dy)
                boxes.append(box)
                break
        ha = "right" if chosen[0] < 0 else "center" if chosen[0] == 0 else "left"
        ax.annotate(text, (x, y), fontsize=fontsize, xytext=chosen, textcoords="offset points", ha=ha)


def cost_vs_f1(runs: list[Run], out_dir: str | Path, stem: str = "cost_vs_f1", *, n_resamples: int = N_RESAMPLES,
               seed: int = 0) -> list[Path]:
    """Average F1 (with its 95% CI) against tokens and seconds per question, one point per (model,
    method); an open marker where the tokens are a lower bound (`cost_data`)."""
    rows = cost_data(runs, n_resamples=n_resamples, seed=seed)
    if not rows:
        raise ValueError("cost_vs_f1: no run with answered questions")
    fig = Figure(figsize=(10.0, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    models = list(dict.fromkeys(r["model"] for r in rows))
    markers = "osD^vP*X"
    for ax, key, xlabel in ((axes[0], "tokens_per_question", "LLM tokens per question (ingest share + recall + answer)"),
                            (axes[1], "seconds_per_question", "seconds per question (ingest share + answer)")):
        shown = [r for r in rows if r[key] is not None]
        for r in shown:
            i = models.index(r["model"])
            color = COLORS[i % len(COLORS)]
            low = r["f1"] is not None and r["tokens_basis"] == RECORDS and key == "tokens_per_question"
            yerr = None if r["f1_ci_low"] is None else [[r["f1"] - r["f1_ci_low"]], [r["f1_ci_high"] - r["f1"]]]
            bars = ax.errorbar([r[key]], [r["f1"] or 0.0], yerr=yerr, fmt=markers[i % len(markers)], color=color,
                               markerfacecolor="white" if low else color, ecolor=color, elinewidth=0.8, capsize=2,
                               markersize=5, label=r["model"])
            for line in bars.lines[2]:  # the whiskers: lighter than the labels that may cross them
                line.set_alpha(0.45)
        if shown and all(r[key] > 0 for r in shown):
            ax.set_xscale("log")
            _log_axis(ax.xaxis)
        ax.margins(x=0.12, y=0.05)  # room for the labels of the outermost points
        _place_labels(ax, [(r[key], r["f1"] or 0.0, r["label"] + (" (≥)" if r["tokens_basis"] == RECORDS and
                                                                   key == "tokens_per_question" else ""))
                           for r in shown])
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"average F1 (%), whiskers: {CI_NOTE}", fontsize=8)
    if len(models) > 1:
        handles, labels = axes[0].get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        axes[0].legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    fig.suptitle(f"Cost vs average F1 ({', '.join(models)}). Whiskers: each run's own 95% CI (differences between "
                 "runs are tested paired: scgmem-report claims). Open marker, (≥): tokens from the records' answer "
                 "prompts only (usage not logged for every answer), a lower bound", fontsize=8, wrap=True)
    out_dir = Path(out_dir)
    return _save(fig, out_dir, stem) + [_write_csv(out_dir / f"{stem}.csv", rows)]
