"""The report's statistics: Holm's adjustment by hand, two-sided p-values, the share of resamples
each run of a sweep is on top, and one bootstrap size everywhere."""
from __future__ import annotations

import numpy as np
import pytest

from scgmem.report import cli
from scgmem.report.paired import N_RESAMPLES, holm, paired_mean, top_shares, two_sided_p
from scgmem.report.collect import collect
from tests.report import rec, write_run


def test_holm_against_a_hand_computation():
    # Sorted: 0.005*5 = 0.025, 0.01*4 = 0.04, 0.03*3 = 0.09, 0.04*2 = 0.08 -> 0.09 (never below the
    # step before), 0.20*1 = 0.20; back in the input order.
    assert holm([0.01, 0.04, 0.03, 0.20, 0.005]) == pytest.approx([0.04, 0.09, 0.09, 0.20, 0.025])
    # The seven raw p of "SCG-Mem above every baseline" on conv-26 before this rule (claims.md at
    # 8e1be45: full context 0.033, ReadAgent 0.976, MemoryBank 0.389, MemGPT 0.025, A-MEM 0.387,
    # rag 0.598, rag_locomo 0.274): the smallest becomes 7 * 0.025 = 0.175, the next 6 * 0.033.
    raw = [0.033, 0.976, 0.389, 0.025, 0.387, 0.598, 0.274]
    assert holm(raw) == pytest.approx([0.198, 1.0, 1.0, 0.175, 1.0, 1.0, 1.0])
    assert holm([0.5]) == [0.5] and holm([]) == []


def test_p_values_are_two_sided():
    assert two_sided_p(np.array([1.0, 2.0, 3.0, -1.0])) == pytest.approx(0.5)  # 2 * min(1/4, 3/4)
    assert two_sided_p(np.array([-1.0, -2.0])) == two_sided_p(np.array([1.0, 2.0])) == 0.0
    a, b = [60.0, 70.0, 40.0, 55.0, 80.0, 20.0], [50.0, 70.0, 45.0, 40.0, 60.0, 30.0]
    ab, ba = paired_mean(a, b, n_resamples=500), paired_mean(b, a, n_resamples=500)
    assert ab["p_value"] == pytest.approx(ba["p_value"])  # the same whichever run is a
    assert ab["diff"] == pytest.approx(-ba["diff"]) and ab["ci_low"] == pytest.approx(-ba["ci_high"])


def test_top_shares_sum_to_one_and_favour_the_clearly_best(tmp_path):
    for name, level in (("low", 0.1), ("high", 0.9), ("mid", 0.5)):
        records = [rec("conv-1", i, c, level if i % 3 else level / 2) for i, c in enumerate([1, 2, 4, 5] * 6)]
        write_run(tmp_path / name, model="m", method="scgmem", records=records, method_cfg={"k": len(name)})
    runs = sorted(collect(tmp_path), key=lambda r: r.run_dir.name)  # high, low, mid
    shares = top_shares(runs, n_resamples=300)
    assert sum(shares) == pytest.approx(1.0) and shares[0] == pytest.approx(1.0)


def test_every_report_bootstrap_defaults_to_10000_resamples():
    assert N_RESAMPLES == 10_000
    for argv in (["table1"], ["fig3"], ["claims", "--runs", "x"], ["rescore", "x", "--gold", "original"],
                 ["judge", "x"]):
        assert cli.parser().parse_args(argv).n_resamples == 10_000, argv
