"""scripts/bench_decode_step.paired_ratio (issue 57, item 6): the ratio of medians over interleaved
(constrained, free) pairs and a bootstrap CI over whole pairs, on hand-made pairs."""
from __future__ import annotations

from scripts.bench_decode_step import paired_ratio


def test_identical_pairs_give_their_ratio_and_a_point_ci():
    result = paired_ratio([(1.1, 1.0)] * 8)
    assert result["ratio"] == 1.1 / 1.0 and result["ci95"][0] == result["ci95"][1] == 1.1 / 1.0
    assert result["pairs"] == 8


def test_the_ci_widens_with_spread_and_holds_the_ratio():
    pairs = [(1.0 + 0.05 * (i % 4), 1.0) for i in range(12)]  # ratios 1.00-1.15
    result = paired_ratio(pairs)
    low, high = result["ci95"]
    assert 1.0 <= low <= result["ratio"] <= high <= 1.15 and low < high
