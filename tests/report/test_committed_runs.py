"""The committed conv-26 comparison reads as one run per (model, method) in each group, so the
report commands of results/embedded/conv26_full/README.md work (a shard summary left as
summary.json beside its merged run once made `scgmem-report table1` refuse two MemGPT runs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from scgmem.report.collect import collect, index_runs

RUNS = Path(__file__).resolve().parents[2] / "results" / "embedded" / "conv26_full" / "runs"


@pytest.mark.parametrize("group", ["table1", "table2", "fig3", "fig4"])
def test_each_committed_group_holds_one_run_per_method_setting(group):
    runs = collect(RUNS / group)
    keys = [(r.model, r.method, str(sorted(r.config.get("method", {}).items()))) for r in runs]
    assert len(keys) == len(set(keys)), keys
    assert all(len(r.records) == 186 for r in runs)
    if group == "table1":
        assert len(index_runs(runs, lambda r: (r.model, r.method))) == len(runs) == 8
