"""The paper's claims, tested on runs that answered the same questions.

Every comparison is paired: two runs are matched question by question on (sample_id, qa_index),
and the difference of their *average* F1 (the paper's unweighted mean over the scored
categories) is resampled by a stratified paired bootstrap (`scgmem.report.paired`; 10,000
resamples, p-values two-sided). A claim "A scores above B"

- **holds** when the difference is positive and its p-value is below 0.05,
- **does not hold** when it is negative with p below 0.05 (B is above A),
- **cannot be told apart** otherwise.

A claim that rests on several tests uses Holm-adjusted p-values (`paired.holm`): "SCG-Mem above
every baseline" is seven tests, and a raw p below 0.05 in two of seven is what chance alone often
gives. The tables print the raw and the adjusted p side by side; the verdict reads the adjusted one.

An optimum at x* (k near 35, Figure 3; one hop, Figure 4) must be able to fail on a flat curve:

- the rule **accepts** a setting x when x is significantly above each neighbour in the sweep (the
  settings just below and just above it; one at either end). Both tests must pass, so no
  correction is needed (an intersection-union test);
- the claim **holds** when the rule accepts x* and no other setting; it **does not hold** when some
  setting is significantly above x* (Holm over x* against every other setting); otherwise (the
  rule accepts none, or several, or another setting that is not significantly above x*) the
  optimum **cannot be told apart**. The evidence names every setting the rule accepts, and the
  share of joint resamples in which each setting has the highest average (`paired.top_shares`).
"""
from __future__ import annotations

from dataclasses import dataclass

from scgmem.method_lists import all_methods
from scgmem.report.collect import Run
from scgmem.report.paired import N_RESAMPLES, P_LABEL, holm, paired_average, top_shares
from scgmem.report.paper import FULL_SETTINGS, run_title
from scgmem.report.writers import md_text

ABOVE, BELOW, UNCLEAR = "holds", "does not hold", "cannot be told apart"
ALPHA = 0.05
BASELINE_ORDER = tuple(m for m in all_methods() if m not in ("scgmem", "last_turns"))  # Table 1's, then ours


def verdict(test: dict, alpha: float = ALPHA) -> str:
    """ABOVE / BELOW / UNCLEAR for "a above b" from a test: its Holm-adjusted p where it has one
    (`p_holm`), else its raw two-sided p."""
    p = test["p_holm"] if test.get("p_holm") is not None else test["p_value"]
    if p >= alpha or test["diff"] == 0:
        return UNCLEAR
    return ABOVE if test["diff"] > 0 else BELOW


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
    return {"a": a_label, "b": b_label, **paired_average(a, b, **kw), "p_holm": None}


def _with_holm(tests: list[dict]) -> list[dict]:
    """The tests with `p_holm` set over them as one family (a family of one keeps its raw p)."""
    for t, adjusted in zip(tests, holm([t["p_value"] for t in tests])):
        t["p_holm"] = adjusted if len(tests) > 1 else None
    return tests


def _flipped(test: dict, a: str, b: str) -> dict:
    """The same resamples read as b minus a (the draws are shared, so every difference changes sign)."""
    return {**test, "a": a, "b": b, "diff": -test["diff"], "ci_low": -test["ci_high"], "ci_high": -test["ci_low"],
            "p_holm": None}


def optimum_rule(xs: list[int], test) -> list[int]:
    """The settings of the sorted sweep `xs` that the optimum rule accepts: x is significantly above
    each neighbour (raw two-sided p, both must pass). `test(x, y)` returns the paired test of x
    minus y."""
    accepted = []
    for i, x in enumerate(xs):
        neighbours = [xs[j] for j in (i - 1, i + 1) if 0 <= j < len(xs)]
        if neighbours and all(verdict({**test(x, y), "p_holm": None}) == ABOVE for y in neighbours):
            accepted.append(x)
    return accepted


def _optimum_claim(runs: list[Run], setting: str, paper_best: int, title: str, **kw) -> Claim | None:
    """Whether `setting` = paper_best is the optimum among SCG-Mem runs differing only in it."""
    points = {}
    for r in runs:
        if r.method == "scgmem" and _is_full(r, **{setting: r.setting(setting, FULL_SETTINGS[setting])}):
            points[int(r.setting(setting, FULL_SETTINGS[setting]))] = r
    if paper_best not in points or len(points) < 2:
        return None
    xs = sorted(points)
    name = {x: f"{setting}={x}" for x in xs}
    best = points[paper_best]
    tests = _with_holm([_test(best, points[x], name[paper_best], name[x], **kw) for x in xs if x != paper_best])
    by_pair = {(paper_best, x): t for x, t in zip([x for x in xs if x != paper_best], tests)}
    for lo, hi in zip(xs, xs[1:]):  # neighbours not involving x*, for the rule over every setting
        if paper_best not in (lo, hi):
            t = _test(points[lo], points[hi], name[lo], name[hi], **kw)
            tests.append(t)
            by_pair[(lo, hi)] = t

    def test(x: int, y: int) -> dict:
        return by_pair[(x, y)] if (x, y) in by_pair else _flipped(by_pair[(y, x)], name[x], name[y])

    accepted = optimum_rule(xs, test)
    above_best = [t["b"] for t in tests[:len(xs) - 1] if verdict(t) == BELOW]
    if above_best:
        outcome = BELOW
    elif accepted == [paper_best]:
        outcome = ABOVE
    else:
        outcome = UNCLEAR
    f1 = {x: points[x].summary["average"]["f1"] for x in xs}
    rank = sorted(xs, key=lambda x: -f1[x]).index(paper_best) + 1
    shares = top_shares([points[x] for x in xs], n_resamples=kw.get("n_resamples", N_RESAMPLES), seed=kw.get("seed", 0))
    top = max(xs, key=lambda x: f1[x])
    evidence = (f"the rule (significantly above each neighbour) accepts "
                f"{', '.join(name[x] for x in accepted) or 'no setting'}; "
                f"{name[paper_best]}: {f1[paper_best]:.2f}, rank {rank} of {len(xs)}; highest {name[top]} ({f1[top]:.2f}); "
                f"significantly above {name[paper_best]} after Holm: {', '.join(above_best) or 'none'}; "
                "share of resamples where each is highest: "
                + ", ".join(f"{name[x]} {s:.2f}" for x, s in zip(xs, shares)))
    return Claim(title, outcome, evidence, tests)


def _all_above(full: Run, others: dict[str, str | Run], title: str, **kw) -> Claim | None:
    """SCG-Mem above each of `others` ({label: run}), Holm-adjusted over them."""
    if not others:
        return None
    tests = _with_holm([_test(full, run, "SCG-Mem (k=35, hops=1)", name, **kw) for name, run in others.items()])
    verdicts = [verdict(t) for t in tests]
    outcome = ABOVE if all(v == ABOVE for v in verdicts) else BELOW if BELOW in verdicts else UNCLEAR
    if len(tests) == 1:
        t = tests[0]
        evidence = f"{t['b']}: {t['diff']:+.2f} [{t['ci_low']:+.2f}, {t['ci_high']:+.2f}], p {t['p_value']:.3f}"
    else:
        groups = {v: [t["b"] for t, w in zip(tests, verdicts) if w == v] for v in (ABOVE, BELOW, UNCLEAR)}
        smallest = min(tests, key=lambda t: t["p_holm"])
        evidence = (f"Holm over {len(tests)} tests: above {', '.join(groups[ABOVE]) or 'none'}; below "
                    f"{', '.join(groups[BELOW]) or 'none'}; not told apart from {len(groups[UNCLEAR])}; smallest "
                    f"adjusted p {smallest['p_holm']:.3f} ({smallest['b']}, raw {smallest['p_value']:.3f}). "
                    + "; ".join(f"{t['b']}: {t['diff']:+.2f} [{t['ci_low']:+.2f}, {t['ci_high']:+.2f}]" for t in tests))
    return Claim(title, outcome, evidence, tests)


def paper_claims(runs: list[Run], n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[Claim]:
    """Each of the paper's claims that `runs` can test (runs of one model on the same questions)."""
    models = sorted({r.model for r in runs})
    if len(models) != 1:
        raise ValueError(f"claims compare runs of one model; got {models}")
    kw = {"n_resamples": n_resamples, "seed": seed}
    full = _pick(runs, "SCG-Mem (k=35, hops=1, full)", _is_full)
    if full is None:
        raise ValueError("claims need the full SCG-Mem run (method=scgmem, k=35, hops=1, constraint and evolution on)")
    baselines = {run_title(m): run for m in BASELINE_ORDER if (run := _pick(runs, m, lambda r, m=m: r.method == m))}
    ablations = {name: run for name, changed in (("w/o cognitive constraint", {"constraint": False}),
                                                 ("w/o schema evolution", {"evolution": False}))
                 if (run := _pick(runs, name, lambda r, c=changed: _is_full(r, **c)))}
    claims = [
        _all_above(full, baselines, "SCG-Mem above every baseline (Table 1)", **kw),
        _all_above(full, {k: v for k, v in baselines.items() if k == run_title("amem")}, "SCG-Mem above A-MEM (Table 1)",
                   **kw),
        *[_all_above(full, {name: run}, f"{name} below the full method (Table 2)", **kw)
          for name, run in ablations.items()],
        _optimum_claim(runs, "k", FULL_SETTINGS["k"], "an optimum of k near 35 (Figure 3)", **kw),
        _optimum_claim(runs, "hops", FULL_SETTINGS["hops"], "an optimum at one association hop (Figure 4)", **kw),
    ]
    return [c for c in claims if c is not None]


def _p(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def claims_markdown(claims: list[Claim], note: str) -> str:
    """The claims table and, below it, every paired test behind it."""
    lines = ["| claim | verdict | evidence (average F1, percent points; 95% CI) |", "|---|---|---|"]
    lines += [f"| {c.claim} | **{c.verdict}** | {md_text(c.evidence)} |" for c in claims]
    lines += ["", "Paired tests (stratified paired bootstrap of average F1, a minus b; "
              f"{P_LABEL}: twice the smaller tail; p (Holm): adjusted over the claim's tests of the same a against "
              "every other run, the p its verdict reads; – for a claim of one test, and for the neighbour tests "
              "of the optimum rule, which must all pass and read the raw p):", "",
              f"| claim | a | b | n | diff | 95% CI | {P_LABEL} | p (Holm) |", "|---|---|---|---|---|---|---|---|"]
    for c in claims:
        lines += [f"| {c.claim} | {md_text(t['a'])} | {md_text(t['b'])} | {t['n']} | {t['diff']:+.2f} | "
                  f"[{t['ci_low']:+.2f}, {t['ci_high']:+.2f}] | {_p(t['p_value'])} | {_p(t.get('p_holm'))} |"
                  for t in c.tests]
    return "\n".join(lines + ["", note, ""])
