"""Figure 3 (scores vs k), Figure 4 (scores by association hops) and cost vs F1, from finished runs.

Figure 3 and 4 of the paper (Section 4.4, hyperparameter analysis): one panel per category,
F1 and BLEU-1 (percent) of SCG-Mem against the swept setting, with bootstrap 95% CIs over
questions as error bars. The cost chart puts every run's average F1 against what it cost:
LLM tokens per question (summary["tokens"], all phases, prompt + generated) and seconds per
question (summary["timing"], ingest + answer; ingest counts even when the memory came from
the cache, since it is the memory's cost).

Plotting uses matplotlib's object API on an Agg canvas (no pyplot state, no display), and the
`*_data` functions hold every plotted number so tests can check them without pixels.
"""
from __future__ import annotations

import csv
import logging
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from scgmem.report.collect import Run, index_runs
from scgmem.report.paper import CATEGORY_TITLES, EXTRA_TITLES, METHOD_TITLES, METRIC_TITLES, METRICS
from scgmem.scoring.metrics import category_cis

log = logging.getLogger(__name__)

# The paper's optima (Figures 3 and 4; docs/methods.md, "SCG-Mem"), drawn as a guide.
PAPER_OPTIMUM = {"k": 35, "hops": 1}
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")


def sweep_data(runs: list[Run], setting: str, *, n_resamples: int = 1000, seed: int = 0) -> dict:
    """Scores of SCG-Mem runs against one method setting ("k" or "hops"), per model and category.

    Returns {model: {category: {"x": [...], "f1": [...], "f1_ci": [(lo, hi) | None], "bleu1": [...],
    "bleu1_ci": [...], "n": [...]}}}, x ascending. Runs of other methods, or without the
    setting, are left out (logged).
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
        mapping = run.category_mapping
        cis = category_cis(run.records, mapping, n_resamples=n_resamples, seed=seed)
        for cat in run.categories:
            series = out.setdefault(model, {}).setdefault(cat, {"x": [], "n": [], **{m: [] for m in METRICS},
                                                                **{f"{m}_ci": [] for m in METRICS}})
            series["x"].append(x)
            series["n"].append(run.summary["categories"][cat]["n"])
            for metric in METRICS:
                series[metric].append(run.summary["categories"][cat][metric])
                ci = (cis.get(cat) or {}).get(metric)
                series[f"{metric}_ci"].append(tuple(ci) if ci else None)
    return out


def cost_data(runs: list[Run]) -> list[dict]:
    """Per run: model, method, average F1 and BLEU-1, tokens and seconds per question."""
    out = []
    for (model, method), run in index_runs(runs, lambda r: (r.model, r.method)).items():
        n = run.summary.get("n_questions") or 0
        if not n:
            continue
        # ingest over every question; recall/answer over the records their counts cover
        # (summary.tokens_questions: fewer than n when a resumed run began before usage.jsonl)
        covered = run.summary.get("tokens_questions") or n
        tokens = {phase: int(counts.get("prompt_tokens", 0)) + int(counts.get("generated_tokens", 0))
                  for phase, counts in (run.summary.get("tokens") or {}).items()}
        per_question = tokens.pop("ingest", 0) / n + sum(tokens.values()) / covered
        timing = run.summary.get("timing") or {}
        seconds = float(timing.get("ingest_s") or 0.0) + float(timing.get("answer_s") or 0.0)
        out.append({"model": model, "method": method, "f1": run.summary["average"]["f1"],
                    "bleu1": run.summary["average"]["bleu1"], "tokens_per_question": per_question,
                    "seconds_per_question": seconds / n, "n_questions": n})
    return out


def _save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    # No creation date: the same runs give the same file (committed figures diff cleanly).
    fig.savefig(paths[1], bbox_inches="tight", metadata={"CreationDate": None})
    return paths


def _write_csv(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["empty"])
        writer.writeheader()
        writer.writerows(rows)
    return path


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
    fig = Figure(figsize=(4.0 * len(categories), 3.4), layout="constrained")
    axes = fig.subplots(1, len(categories), squeeze=False)[0]
    return fig, list(axes), categories


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
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return (_save(fig, stem_path.parent, stem_path.name)
            + [_write_csv(stem_path.with_suffix(".csv"), _sweep_rows(data, setting))])


def figure3(runs: list[Run], out_dir: str | Path, *, n_resamples: int = 1000, seed: int = 0) -> list[Path]:
    """Figure 3: F1 and BLEU-1 against k, one panel per category. Writes fig3.png/.pdf/.csv."""
    data = sweep_data(runs, "k", n_resamples=n_resamples, seed=seed)
    fig, axes, categories = _panels(data)
    for ax, cat in zip(axes, categories):
        for i, (model, per_cat) in enumerate(data.items()):
            s = per_cat.get(cat)
            if s is None:
                continue
            for j, (metric, style) in enumerate(zip(METRICS, ("-o", "--s"))):
                label = f"{METRIC_TITLES[metric]}" + (f" ({model})" if len(data) > 1 else "")
                ax.errorbar(s["x"], s[metric], yerr=_errors(s[metric], s[f"{metric}_ci"]), fmt=style,
                            color=_color(i, j, len(data)), capsize=2, markersize=4, label=label)
        ax.axvline(PAPER_OPTIMUM["k"], color="0.6", linestyle=":", linewidth=1)
        ax.set_title(CATEGORY_TITLES.get(cat, cat))
        ax.set_xlabel("k (recalled concepts)")
        ax.grid(alpha=0.3)
    title = f"Figure 3: SCG-Mem vs k ({', '.join(data)}); dotted: the paper's optimum k = {PAPER_OPTIMUM['k']}"
    return _finish_sweep(fig, axes, title, data, "k", Path(out_dir) / "fig3")


def figure4(runs: list[Run], out_dir: str | Path, *, n_resamples: int = 1000, seed: int = 0) -> list[Path]:
    """Figure 4: per-category bars of F1 and BLEU-1 by association hops. Writes fig4.png/.pdf/.csv."""
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
            label = METRIC_TITLES[metric] + (f" ({model})" if len(data) > 1 else "")
            ax.bar(xs, s[metric], width=width, yerr=_errors(s[metric], s[f"{metric}_ci"]), capsize=2, color=color,
                   hatch="" if metric == "f1" else "//", label=label)
        ax.set_xticks(sorted(hops_seen))
        ax.set_title(CATEGORY_TITLES.get(cat, cat))
        ax.set_xlabel("association hops")
        ax.grid(axis="y", alpha=0.3)
    title = f"Figure 4: SCG-Mem by hops ({', '.join(data)}); the paper's optimum: {PAPER_OPTIMUM['hops']} hop"
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


def cost_vs_f1(runs: list[Run], out_dir: str | Path, stem: str = "cost_vs_f1") -> list[Path]:
    """Average F1 against tokens and seconds per question, one point per (model, method)."""
    rows = cost_data(runs)
    if not rows:
        raise ValueError("cost_vs_f1: no run with answered questions")
    fig = Figure(figsize=(9.0, 3.6), layout="constrained")
    axes = fig.subplots(1, 2)
    models = list(dict.fromkeys(r["model"] for r in rows))
    markers = "osD^vP*X"
    for ax, key, xlabel in ((axes[0], "tokens_per_question", "LLM tokens per question (ingest + recall + answer)"),
                            (axes[1], "seconds_per_question", "seconds per question (ingest + answer)")):
        for r in rows:
            i = models.index(r["model"])
            ax.scatter(r[key], r["f1"] or 0.0, marker=markers[i % len(markers)], color=COLORS[i % len(COLORS)],
                       label=r["model"])
        if all(r[key] > 0 for r in rows):
            ax.set_xscale("log")
            _log_axis(ax.xaxis)
        ax.margins(x=0.12, y=0.12)  # room for the labels of the outermost points
        _place_labels(ax, [(r[key], r["f1"] or 0.0, _method_label(r["method"])) for r in rows])
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("average F1 (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes[0].legend(unique.values(), unique.keys(), fontsize=7)
    fig.suptitle("Cost vs F1 across methods", fontsize=9)
    out_dir = Path(out_dir)
    return _save(fig, out_dir, stem) + [_write_csv(out_dir / f"{stem}.csv", rows)]


def _method_label(method: str) -> str:
    """A method's short title for a point label ("Dense RAG (ours)" -> "Dense RAG")."""
    return (METHOD_TITLES.get(method) or EXTRA_TITLES.get(method, method)).split(" (")[0]
