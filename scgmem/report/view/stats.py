"""The viewer's numbers with intervals, computed as the reports compute them: per run, each
category's F1 and BLEU-1 with a bootstrap 95% CI (`scoring.metrics.category_cis`) and the paper's
Average with `average_ci` (as Table 1); per pair of runs on shared questions, the paired bootstrap
of F1 per category (`report.paired.paired_mean`) and of the Average (`paired_average`), two-sided p.
"""
from __future__ import annotations

import itertools

from scgmem.report.collect import Run
from scgmem.report.paired import paired_average, paired_mean
from scgmem.scoring.metrics import average_ci, category_cis

METRICS = ("f1", "bleu1")
MAX_PAIRED_RUNS = 20  # above this many runs, pairs with the first run only (pairs grow as n^2)


def category_table(run: Run, n_resamples: int, seed: int) -> dict:
    """{category name: {"n", "f1", "bleu1", "ci": {metric: [low, high]}}, "average": {...}} in percent."""
    mapping = run.category_mapping
    cis = category_cis(run.records, mapping, n_resamples=n_resamples, seed=seed)
    out = {}
    for name, values in run.summary["categories"].items():
        out[name] = {"n": values.get("n"), **{m: values.get(m) for m in METRICS}, "ci": cis.get(name) or {}}
    out["average"] = {"n": len(run.records), **{m: run.summary["average"].get(m) for m in METRICS},
                      "ci": {m: average_ci(run.records, mapping, m, n_resamples=n_resamples, seed=seed)
                             for m in METRICS}}
    return out


def pair_table(a: Run, b: Run, n_resamples: int, seed: int) -> dict | None:
    """Paired F1 of run a minus run b per category and for the Average (percent points), on the
    questions both answered; None when they share none."""
    by_b = {(r["sample_id"], r["qa_index"]): r for r in b.records}
    shared = [(r, by_b[(r["sample_id"], r["qa_index"])]) for r in a.records if (r["sample_id"], r["qa_index"]) in by_b]
    if not shared:
        return None
    out = {}
    for number, name in a.category_mapping.items():
        pairs = [(ra, rb) for ra, rb in shared if ra["category"] == number]
        if pairs:
            test = paired_mean([100.0 * ra["f1"] for ra, _ in pairs], [100.0 * rb["f1"] for _, rb in pairs],
                               n_resamples=n_resamples, seed=seed)
            out[name] = {"n": len(pairs), **test}
    out["average"] = paired_average(a, b, n_resamples=n_resamples, seed=seed)
    return out


def pairs(runs: list[Run], n_resamples: int, seed: int) -> dict[str, dict]:
    """"i,j" -> pair_table(runs[i], runs[j]) for i < j (with the first run only past MAX_PAIRED_RUNS)."""
    indices = range(len(runs))
    chosen = itertools.combinations(indices, 2) if len(runs) <= MAX_PAIRED_RUNS else ((0, j) for j in indices[1:])
    out = {}
    for i, j in chosen:
        table = pair_table(runs[i], runs[j], n_resamples, seed)
        if table is not None:
            out[f"{i},{j}"] = table
    return out
