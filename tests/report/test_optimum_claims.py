"""An optimum claim (Figures 3-4) must be able to fail: a flat curve with one low point is "cannot
be told apart", a clear peak holds, and several accepted peaks are named and not told apart."""
from __future__ import annotations

import numpy as np

from scgmem.report.claims import ABOVE, BELOW, UNCLEAR, paper_claims
from scgmem.report.collect import collect
from tests.report import rec, write_run

CATS = (1, 2, 4, 5)
K_CLAIM = "an optimum of k near 35 (Figure 3)"
HOPS_CLAIM = "an optimum at one association hop (Figure 4)"


def _base(n: int = 40, seed: int = 0) -> dict[int, np.ndarray]:
    """Per category, n question scores in 0..1 (the spread of real F1s: many zeros, some ones)."""
    rng = np.random.default_rng(seed)
    return {c: rng.choice([0.0, 0.0, 0.25, 0.5, 1.0], size=n) for c in CATS}


def _write(root, name: str, scores: dict[int, np.ndarray], **settings) -> None:
    records, i = [], 0
    for cat, values in scores.items():
        for v in values:
            records.append(rec("conv-26", i, cat, float(v)))
            i += 1
    write_run(root / name, model="m", method="scgmem", records=records,
              method_cfg={"k": 35, "hops": 1, "constraint": True, "evolution": True, **settings})


def _shuffled(scores: dict[int, np.ndarray], seed: int) -> dict[int, np.ndarray]:
    """The same scores in another order within each category: every category mean is the same
    (a flat curve), yet each question scores differently, as two real settings would."""
    rng = np.random.default_rng(seed)
    return {c: rng.permutation(v) for c, v in scores.items()}


def _shifted(scores: dict[int, np.ndarray], by: float) -> dict[int, np.ndarray]:
    return {c: np.clip(v + by, 0.0, 1.0) for c, v in scores.items()}


def _claims(root) -> dict:
    return {c.claim: c for c in paper_claims(collect(root), n_resamples=2000)}


def test_a_flat_curve_with_one_degenerate_low_point_cannot_be_told_apart(tmp_path):
    """As on conv-26: k = 5 is the hops-0 run in effect (much lower), every other k is level. The
    rule "nothing above x*, one setting below" said "holds" for k = 35 and for every other k."""
    base = _base()
    _write(tmp_path, "k5", {c: v * 0.3 for c, v in base.items()}, k=5)
    for seed, k in enumerate((10, 15, 20, 25, 35, 50)):
        _write(tmp_path, f"k{k}", base if k == 35 else _shuffled(base, seed), k=k)
    claim = _claims(tmp_path)[K_CLAIM]
    assert claim.verdict == UNCLEAR, claim.evidence
    assert "accepts no setting" in claim.evidence


def test_one_hop_on_a_flat_curve_with_hops_0_below_cannot_be_told_apart(tmp_path):
    base = _base(seed=1)
    _write(tmp_path, "hops0", {c: v * 0.3 for c, v in base.items()}, hops=0)
    _write(tmp_path, "hops1", base, hops=1)
    _write(tmp_path, "hops2", _shuffled(base, 7), hops=2)
    assert _claims(tmp_path)[HOPS_CLAIM].verdict == UNCLEAR


def test_a_clear_peak_holds(tmp_path):
    base = _base(seed=2)
    for k, by in ((5, -0.4), (10, -0.3), (20, -0.3), (35, 0.0), (50, -0.3)):
        _write(tmp_path, f"k{k}", _shifted(_shuffled(base, k), by) if k != 35 else base, k=k)
    claim = _claims(tmp_path)[K_CLAIM]
    assert claim.verdict == ABOVE, claim.evidence
    assert "accepts k=35;" in claim.evidence


def test_a_peak_elsewhere_that_is_above_the_papers_point_does_not_hold(tmp_path):
    base = _base(seed=3)
    for k, by in ((5, -0.5), (20, 0.0), (35, -0.4), (50, -0.5)):
        _write(tmp_path, f"k{k}", _shifted(_shuffled(base, k), by) if k != 20 else base, k=k)
    claim = _claims(tmp_path)[K_CLAIM]
    assert claim.verdict == BELOW
    assert "accepts k=20;" in claim.evidence and "after Holm: k=20" in claim.evidence


def test_two_peaks_the_rule_accepts_are_named_and_not_told_apart(tmp_path):
    base = _base(seed=4)
    for k, by in ((5, -0.4), (10, 0.0), (20, -0.4), (35, 0.0), (50, -0.4)):
        _write(tmp_path, f"k{k}", _shifted(_shuffled(base, k), by) if k != 35 else base, k=k)
    claim = _claims(tmp_path)[K_CLAIM]
    assert claim.verdict == UNCLEAR
    assert "accepts k=10, k=35;" in claim.evidence
