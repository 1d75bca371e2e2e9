"""The paper's claims, tested on runs that answered the same questions.

Every comparison here is paired: two runs are matched question by question on
(sample_id, qa_index), and the difference of their *average* F1 (the paper's unweighted mean
over the scored categories) is resampled by a stratified paired bootstrap: questions are
drawn with replacement within each category, as the average weighs categories, not
questions. A claim "A scores above B" then

- **holds** when the 95% interval of mean(A) - mean(B) lies above zero,
- **does not hold** when it lies below zero (B is above A),
- **cannot be told apart** when it crosses zero.

The claims (paper Sections 4.2-4.5): SCG-Mem above every baseline (Table 1), above A-MEM in
particular, each ablation below the full method (Table 2), an optimum of k near 35
(Figure 3) and of one association hop (Figure 4). For an optimum at x*, the claim holds when
no other setting is above x* (each such interval crosses zero or lies below it) and x* is
above at least one setting; it does not hold when some setting is above x*.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scgmem.report.collect import Run
from scgmem.report.writers import md_text

ABOVE, BELOW, UNCLEAR = "holds", "does not hold", "cannot be told apart"
# SCG-Mem's settings in the paper's main configuration (configs/method/scgmem.yaml).
FULL_SETTINGS = {"k": 35, "hops": 1, "constraint": True, "evolution": True}
BASELINE_ORDER = ("full_context", "readagent", "memorybank", "memgpt", "amem", "rag", "rag_locomo")


def paired_average(a: Run, b: Run, n_resamples: int = 2000, seed: int = 0, alpha: float = 0.05) -> dict:
    """Stratified paired bootstrap of average F1 (percent points) of run `a` minus run `b`.

    Returns {"n", "unmatched", "diff", "ci_low", "ci_high", "p_value"}; p_value is two-sided
    (twice the smaller tail of the resampled differences around zero, capped at 1).
    Raises ValueError when the runs share no question.
    """
    a_by = {(r["sample_id"], r["qa_index"]): r for r in a.records}
    b_by = {(r["sample_id"], r["qa_index"]): r for r in b.records}
    shared = sorted(a_by.keys() & b_by.keys())
    if not shared:
        raise ValueError(f"{a.run_dir} and {b.run_dir} answered no question in common")
    by_cat: dict[int, np.ndarray] = {}
    for cat in sorted({int(a_by[k]["category"]) for k in shared}):
        keys = [k for k in shared if int(a_by[k]["category"]) == cat]
        by_cat[cat] = np.array([100.0 * (float(a_by[k]["f1"]) - float(b_by[k]["f1"])) for k in keys])
    rng = np.random.default_rng(seed)
    resampled = np.zeros(n_resamples)
    for diffs in by_cat.values():  # (n_cat,) -> each resample's category mean, (n_resamples,)
        idx = rng.integers(0, len(diffs), size=(n_resamples, len(diffs)))
        resampled += diffs[idx].mean(axis=1)
    resampled /= len(by_cat)
    diff = float(np.mean([d.mean() for d in by_cat.values()]))
    low, high = np.quantile(resampled, [alpha / 2, 1 - alpha / 2])
    p = min(1.0, 2 * min(float(np.mean(resampled <= 0)), float(np.mean(resampled >= 0))))
    return {"n": len(shared), "unmatched": len(a_by.keys() ^ b_by.keys()), "diff": diff,
            "ci_low": float(low), "ci_high": float(high), "p_value": p}


def verdict(test: dict) -> str:
    """ABOVE / BELOW / UNCLEAR for "a above b" from a paired_average result."""
    if test["ci_low"] > 0:
        return ABOVE
    if test["ci_high"] < 0:
        return BELOW
    return UNCLEAR


@dataclass
class Claim:
    claim: str
    verdict: str
    evidence: str
    tests: list[dict]


def _is_full(run: Run, **changed) -> bool:
    want = {**FULL_SETTINGS, **changed}
    return run.method == "scgmem" and all(run.setting(k, FULL_SETTINGS[k]) == v for k, v in want.items())


def _pick(runs: list[Run], label: str, predicate) -> Run | None:
    found = [r for r in runs if predicate(r)]
    if len(found) > 1:
        raise ValueError(f"two runs for {label}: {found[0].run_dir} and {found[1].run_dir}")
    return found[0] if found else None


def _test(a: Run, b: Run, a_label: str, b_label: str, **kw) -> dict:
    return {"a": a_label, "b": b_label, **paired_average(a, b, **kw)}


def _optimum_claim(runs: list[Run], setting: str, paper_best: int, title: str, **kw) -> Claim | None:
    """Whether `setting` = paper_best is the optimum among SCG-Mem runs differing only in it."""
    points = {}
    for r in runs:
        if r.method == "scgmem" and _is_full(r, **{setting: r.setting(setting, FULL_SETTINGS[setting])}):
            points[int(r.setting(setting, FULL_SETTINGS[setting]))] = r
    if paper_best not in points or len(points) < 2:
        return None
    best = points[paper_best]
    tests = [_test(best, points[x], f"{setting}={paper_best}", f"{setting}={x}", **kw)
             for x in sorted(points) if x != paper_best]
    verdicts = [verdict(t) for t in tests]
    if BELOW in verdicts:
        outcome = BELOW
    elif ABOVE in verdicts:
        outcome = ABOVE
    else:
        outcome = UNCLEAR
    top = max(points, key=lambda x: points[x].summary["average"]["f1"])
    evidence = (f"highest average F1 at {setting}={top} ({points[top].summary['average']['f1']:.2f}); "
                f"{setting}={paper_best}: {best.summary['average']['f1']:.2f}; "
                f"{sum(v == BELOW for v in verdicts)} setting(s) above it, {sum(v == ABOVE for v in verdicts)} below, "
                f"{sum(v == UNCLEAR for v in verdicts)} not told apart")
    return Claim(title, outcome, evidence, tests)


def _all_above(full: Run, others: dict[str, Run], title: str, **kw) -> Claim | None:
    if not others:
        return None
    tests = [_test(full, run, "scgmem", name, **kw) for name, run in others.items()]
    verdicts = [verdict(t) for t in tests]
    outcome = ABOVE if all(v == ABOVE for v in verdicts) else BELOW if BELOW in verdicts else UNCLEAR
    evidence = "; ".join(f"{t['b']}: {t['diff']:+.2f} [{t['ci_low']:+.2f}, {t['ci_high']:+.2f}]" for t in tests)
    return Claim(title, outcome, evidence, tests)


def paper_claims(runs: list[Run], n_resamples: int = 2000, seed: int = 0) -> list[Claim]:
    """Each of the paper's claims that `runs` can test (runs of one model on the same questions)."""
    models = sorted({r.model for r in runs})
    if len(models) != 1:
        raise ValueError(f"claims compare runs of one model; got {models}")
    kw = {"n_resamples": n_resamples, "seed": seed}
    full = _pick(runs, "SCG-Mem (k=35, hops=1, full)", _is_full)
    if full is None:
        raise ValueError("claims need the full SCG-Mem run (method=scgmem, k=35, hops=1, constraint and evolution on)")
    baselines = {m: run for m in BASELINE_ORDER if (run := _pick(runs, m, lambda r, m=m: r.method == m))}
    ablations = {name: run for name, changed in (("w/o cognitive constraint", {"constraint": False}),
                                                 ("w/o schema evolution", {"evolution": False}))
                 if (run := _pick(runs, name, lambda r, c=changed: _is_full(r, **c)))}
    claims = [
        _all_above(full, baselines, "SCG-Mem above every baseline (Table 1)", **kw),
        _all_above(full, {k: v for k, v in baselines.items() if k == "amem"}, "SCG-Mem above A-MEM (Table 1)", **kw),
        *[_all_above(full, {name: run}, f"{name} below the full method (Table 2)", **kw)
          for name, run in ablations.items()],
        _optimum_claim(runs, "k", 35, "an optimum of k near 35 (Figure 3)", **kw),
        _optimum_claim(runs, "hops", 1, "an optimum at one association hop (Figure 4)", **kw),
    ]
    return [c for c in claims if c is not None]


def claims_markdown(claims: list[Claim], note: str) -> str:
    """The claims table and, below it, every paired test behind it."""
    lines = ["| claim | verdict | evidence (average F1, percent points; 95% CI) |", "|---|---|---|"]
    lines += [f"| {c.claim} | **{c.verdict}** | {md_text(c.evidence)} |" for c in claims]
    lines += ["", "Paired tests (stratified paired bootstrap of average F1, a minus b):", "",
              "| claim | a | b | n | diff | 95% CI | p (two-sided) |", "|---|---|---|---|---|---|---|"]
    for c in claims:
        lines += [f"| {c.claim} | {md_text(t['a'])} | {md_text(t['b'])} | {t['n']} | {t['diff']:+.2f} | "
                  f"[{t['ci_low']:+.2f}, {t['ci_high']:+.2f}] | {t['p_value']:.3f} |" for t in c.tests]
    return "\n".join(lines + ["", note, ""])
