"""scripts/gpu_estimate.py (issue 57, item 4): the cost model on hand-worked requests, and
`make reproduce-times BACKEND=vllm` prints the committed estimate's total with its low and high end."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scripts import gpu_estimate as est

ROOT = Path(__file__).resolve().parents[2]


def req(start, end, prompt=100, gen=10, phase="ingest", uncached=0.5, kind="free_text"):
    return {"start": start, "end": end, "prompt_tokens": prompt, "completion_tokens": gen, "phase": phase,
            "uncached": uncached, "kind": kind}


def test_the_chain_follows_happens_before_only():
    # A [0, 1] then B [2, 3] (after A); C [0.5, 4] overlaps both: chain A+B = 3 beats C = 2.5
    records = [req(0, 1), req(2, 3), req(0.5, 4)]
    assert est.chain(records, [1.0, 2.0, 2.5]) == 3.0
    assert est.chain(records, [1.0, 2.0, 5.0]) == 5.0


def test_uncached_share_is_what_no_earlier_prompt_shares():
    records = [{"start": 0, "body": {"prompt": "abcdefgh"}}, {"start": 1, "body": {"prompt": "abcdXXXX"}},
               {"start": 2, "body": {"prompt": "zzzz"}}]
    assert est.uncached_shares(records) == [1.0, 0.5, 1.0]


def test_job_hours_add_prefill_decode_and_overhead_at_the_high_end():
    constants = {**est.CONSTANTS, "decode_s_batch1": {"m": (0.01, 0.02)}, "prefill_tokens_per_s": {"m": 1000.0},
                 "batch_slope": 0.0, "h100_speedup": (2.0, 1.0), "grammar_compile_s": 0.5}
    scale = {"turns": {"conv-26": 10, "conv-30": 10}, "questions": {"conv-26": 5, "conv-30": 5}}
    profile = {"mean_in_flight": 0.1, "requests": [req(0, 1, kind="constrained"), req(2, 3, phase="question")]}
    high = est.job_hours(profile, scale, "m", 1, constants)
    # both conversations: factor 2; concurrency 10; prefill 2 x 200 / 1000, decode 2 x 20 x 0.02 / 10, compile 2 x 0.5
    assert high["terms_h"] == {"prefill": round(0.4 / 3600, 4), "decode": round(0.08 / 3600, 4),
                               "overhead": round(1.0 / 3600, 4)}
    assert high["hours"] == pytest.approx(max(0.4 + 0.08 + 1.0, 0.3 + 0.5 + 0.3) / 3600)
    low = est.job_hours(profile, scale, "m", 0, constants)
    assert low["hours"] < high["hours"]


def test_make_reproduce_times_backend_vllm_prints_the_estimate():
    proc = subprocess.run(["make", "-s", "reproduce-times", "BACKEND=vllm"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "H100-hours" in first and "LoCoMo" in first
    low, high = (float(x) for x in first.split(": ")[1].split(" ")[0].split("-"))
    assert 0 < low <= high
    proc = subprocess.run(["make", "-s", "reproduce-times", "BACKEND=gpu"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "BACKEND=gpu" in proc.stderr
