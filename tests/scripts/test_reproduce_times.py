"""scripts/reproduce_times.py: the per-job hours add up to the committed Table 1 estimate, and
docs/reproduce.md shows exactly what the script prints (so the stated times cannot drift)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import reproduce_times as times

ROOT = Path(__file__).resolve().parents[2]


def test_table1_jobs_add_up_to_the_committed_estimate():
    methods, rates = times.load()
    committed = json.loads(times.RATES.read_text())["table1_h200_hours_from_device"]
    for (_, width, steps_key), key in zip(times.WIDTHS, ("parallel_1", "parallel_10_max_batch_tokens_131072")):
        jobs = times.table1_jobs(methods, rates, width, steps_key)
        assert len(jobs) == 24 and len({(m, t) for m, t, _ in jobs}) == 24
        # the committed total used unrounded rates; the JSON keeps them to 3-4 digits
        assert sum(h for _, _, h in jobs) == pytest.approx(committed[key], rel=0.005)


def test_jobs_are_in_sweep_order_and_memgpt_is_the_long_one():
    methods, rates = times.load()
    jobs = times.table1_jobs(methods, rates, "parallel_1", "decode_steps_bound")
    assert [(m, t) for m, t, _ in jobs[:7]] == [("qwen2.5-1.5b", t) for t in times.TABLE1_METHODS] + [
        ("qwen2.5-3b", "full_context")]  # model is the outer loop (hydra's BasicSweeper)
    assert max(jobs, key=lambda j: j[2])[1] == "memgpt"


def test_node_hours_bounds():
    assert times.node_hours([4.0, 1.0, 1.0, 1.0], gpus=2) == (4.0, 5.0)  # GPU 0 runs jobs 0 and 2
    assert times.node_hours([1.0] * 16, gpus=8) == (2.0, 2.0)


def test_docs_state_the_scripts_numbers():
    doc = (ROOT / "docs" / "reproduce.md").read_text(encoding="utf-8")
    assert times.report() in doc, "docs/reproduce.md: rerun python -m scripts.reproduce_times and paste its tables"
