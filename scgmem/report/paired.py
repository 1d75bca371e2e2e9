"""The report's statistics over runs that answered the same questions: one bootstrap size, one
p-value, Holm's correction, and how often each run of a sweep comes out on top.

- `N_RESAMPLES` (10,000) is the default of every bootstrap the report draws (tables, figures,
  claims, rescoring, the judge): a 95% interval's ends then move by about 0.05 points between
  seeds on 186 questions, and it costs seconds.
- Every p-value the report prints is **two-sided**: twice the smaller share of resampled
  differences on either side of zero (capped at 1), so p < 0.05 exactly when the percentile 95%
  interval leaves out zero, whichever run is above.
- `paired_average`: the paper's Average (unweighted mean of the category means) of run a minus
  run b, questions matched on (sample_id, qa_index) and drawn with replacement within each
  category (a stratified paired bootstrap, as the Average weighs categories, not questions).
- `holm`: Holm's step-down adjustment of a family of p-values (Holm 1979), for claims that
  rest on several tests at once ("SCG-Mem above every baseline").
- `top_shares`: the share of joint resamples in which each run has the highest Average.

    >>> holm([0.01, 0.04, 0.03])   # sorted: 0.01*3, max(0.03*2, 0.03), max(0.04*1, 0.06)
    [0.03, 0.06, 0.06]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from scgmem.scoring.metrics import paired_bootstrap

N_RESAMPLES = 10_000
P_LABEL = "p (two-sided)"


def two_sided_p(resampled: np.ndarray) -> float:
    """Twice the smaller share of `resampled` differences at or beyond zero on one side, capped at 1."""
    return min(1.0, 2.0 * min(float(np.mean(resampled <= 0)), float(np.mean(resampled >= 0))))


def paired_mean(a: Sequence[float], b: Sequence[float], n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict:
    """Paired bootstrap of mean(a) - mean(b) (`scgmem.scoring.metrics.paired_bootstrap`) with the
    two-sided p-value: the other tail is the same resamples seen from b (same seed, same draws).

    Returns {"diff", "ci_low", "ci_high", "p_value"} with p_value two-sided."""
    ab = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed)
    ba = paired_bootstrap(b, a, n_resamples=n_resamples, seed=seed)  # share of resampled a - b >= 0
    return {**ab, "p_value": min(1.0, 2.0 * min(ab["p_value"], ba["p_value"]))}


def _by_category(runs, key: str = "f1") -> tuple[list[tuple], dict[int, np.ndarray]]:
    """The questions every run answered, and per category a (n_runs, n_category) array of
    scores in percent, rows in the order of `runs`."""
    by = [{(r["sample_id"], r["qa_index"]): r for r in run.records} for run in runs]
    shared = sorted(set.intersection(*(set(b) for b in by)))
    if not shared:
        raise ValueError(f"{', '.join(str(run.run_dir) for run in runs)}: answered no question in common")
    out: dict[int, np.ndarray] = {}
    for cat in sorted({int(by[0][k]["category"]) for k in shared}):
        keys = [k for k in shared if int(by[0][k]["category"]) == cat]
        out[cat] = np.array([[100.0 * float(b[k][key]) for k in keys] for b in by])
    return shared, out


def _resampled_averages(scores: dict[int, np.ndarray], n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples, n_runs): each run's Average in each stratified resample; all runs share the
    resampled questions (one index draw per category and resample)."""
    rng = np.random.default_rng(seed)
    n_runs = next(iter(scores.values())).shape[0]
    total = np.zeros((n_resamples, n_runs))
    for values in scores.values():  # values: (n_runs, n_category)
        idx = rng.integers(0, values.shape[1], size=(n_resamples, values.shape[1]))  # (n_resamples, n_category)
        for run in range(n_runs):  # one run at a time: (n_resamples, n_category) in memory, not n_runs of them
            total[:, run] += values[run][idx].mean(axis=1)
    return total / len(scores)


def paired_average(a, b, n_resamples: int = N_RESAMPLES, seed: int = 0, alpha: float = 0.05) -> dict:
    """Stratified paired bootstrap of the Average F1 (percent points) of run `a` minus run `b`
    (`scgmem.report.collect.Run`s).

    Returns {"n", "unmatched", "diff", "ci_low", "ci_high", "p_value"}, p_value two-sided.
    Raises ValueError when the runs share no question.
    """
    shared, scores = _by_category([a, b])
    resampled = _resampled_averages({c: v[0:1] - v[1:2] for c, v in scores.items()}, n_resamples, seed)[:, 0]
    diff = float(np.mean([(v[0] - v[1]).mean() for v in scores.values()]))
    low, high = np.quantile(resampled, [alpha / 2, 1 - alpha / 2])
    keys_a = {(r["sample_id"], r["qa_index"]) for r in a.records}
    keys_b = {(r["sample_id"], r["qa_index"]) for r in b.records}
    return {"n": len(shared), "unmatched": len(keys_a ^ keys_b), "diff": diff, "ci_low": float(low),
            "ci_high": float(high), "p_value": two_sided_p(resampled)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest p (from 1) times
    (m - i + 1), made non-decreasing along the sorted order and capped at 1. Rejecting where the
    adjusted p < alpha keeps the chance of any false claim in the family at most alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        adjusted[i] = running
    return adjusted


def top_shares(runs, n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[float]:
    """For each run (in order), the share of joint stratified resamples of the shared questions
    in which its Average F1 is the highest (ties split evenly). Sums to 1."""
    _, scores = _by_category(list(runs))
    averages = _resampled_averages(scores, n_resamples, seed)  # (n_resamples, n_runs)
    top = averages == averages.max(axis=1, keepdims=True)
    return list((top / top.sum(axis=1, keepdims=True)).mean(axis=0))
