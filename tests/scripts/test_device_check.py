"""The device check's dry run on the CPU: one tiny shape, two methods, a couple of questions, the
probes (real tokenizers, long context, batch invariance); and its time limits."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_device_check_dry_run_on_cpu(tmp_path, locomo_path):
    env = {**os.environ, "DEVICE": "cpu", "SHAPES": "tiny", "METHODS": "full_context,scgmem",
           "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels"), "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", "scripts/device_check.sh", str(tmp_path / "out")], cwd=ROOT, env=env, check=True,
                   timeout=480)
    result = json.loads((tmp_path / "out" / "tiny.json").read_text())
    assert result["hidden_size"] == 64 and result["environment"]["device"] == "cpu"
    for method in ("full_context", "scgmem"):
        entry = result["methods"][method]
        assert entry["ok"] is True, entry.get("traceback")
        assert entry["n_questions"] > 0 and entry["generate_calls"] > 0 and entry["mean_rows_per_generate"] >= 1
        assert entry["prefill_tokens_per_s"] > 0 and entry["decode_tokens_per_s"] > 0
        assert entry["same_model"] is True
        assert entry["repetition_penalty"] == [1.0]  # the saved model's 1.05 was neutralised
    throughput = json.loads((tmp_path / "out" / "throughput.json").read_text())  # the check's second part
    assert [s["shape"] for s in throughput["shapes"]] == ["tiny"]
    probes = json.loads((tmp_path / "out" / "probes.json").read_text())
    for name in ("real_tokenizers", "long_context", "batch_invariance"):
        assert probes[name].get("ok", True) is not False, probes[name].get("traceback")
    real = probes["real_tokenizers"]
    assert real["llama3.2"]["ok"] and real["llama3.2"]["eos_ids"] == [128001, 128008, 128009]
    assert real["qwen2.5"]["ok"] and (real["qwen2.5"]["tokens"], real["qwen2.5"]["score_columns"]) == (151665, 151936)
    assert probes["long_context"]["rows"] >= 1 and probes["long_context"]["decode_ms_per_step"] > 0
    assert 0 <= probes["batch_invariance"]["row_agreement"] <= 1


def test_device_check_timeouts_fit_seven_minutes():
    """Install, check and throughput each run under `timeout N`; together at most 420 s, so that a
    second try fits in a 15-minute device session."""
    lines = [line.split("#")[0] for line in (ROOT / "scripts" / "device_check.sh").read_text().splitlines()]
    limits = [int(n) for line in lines for n in re.findall(r"\btimeout (\d+)", line)]
    assert len(limits) == 3 and sum(limits) <= 420, limits


def test_skipped_method_fails_the_check(tmp_path, locomo_path):
    """A method the time budget skips counts as a failure (exit 1), and is recorded as skipped."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "scripts.device_check", "--out", str(tmp_path / "out"), "--device", "cpu",
                           "--shapes", "tiny", "--methods", "full_context", "--budget-s", "0", "--probes", "",
                           "--work", str(tmp_path / "work")], cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 1
    assert "skipped" in json.loads((tmp_path / "out" / "tiny.json").read_text())


def test_device_throughput_dry_run_feeds_the_h200_estimate(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "scripts.device_throughput", "--out", str(tmp_path), "--device", "cpu",
                    "--shapes", "tiny", "--batches", "1,2", "--prompt", "24", "--new", "3",
                    "--work", str(tmp_path / "work")], cwd=ROOT, env=env, check=True, timeout=300)
    throughput = json.loads((tmp_path / "throughput.json").read_text())
    [shape] = throughput["shapes"]
    assert set(shape["batches"]) == {"default", "torch_choice"}
    assert all(v["raw_decode_step_ms"] > 0 and v["generate_s"] > 0 for v in shape["batches"]["default"].values())

    from scripts.bench_batching import TABLE1_METHODS, device_rates, estimate_from_device

    calls = {"decode_steps_bound": 1000, "decode_steps_bound_max_batch_tokens_131072": 500,
             "prompt_tokens_est": 10**6}
    batching = {"methods": {m: {"parallel_1": calls, "parallel_10": calls} for m in TABLE1_METHODS}}
    estimate = estimate_from_device(batching, throughput)
    assert {r["source"] for r in estimate["rates"].values()} == {"scaled from the measured shapes"}
    # six methods x (1000 steps x step + 1e6 tokens / rate), summed over the four models
    expected = sum(6 * (1000 * step + 10**6 / prefill) for step, prefill, _ in device_rates(throughput).values()) / 3600
    assert estimate["parallel_1"] == pytest.approx(expected, abs=0.01)
    assert estimate["parallel_10_max_batch_tokens_131072"] < estimate["parallel_10"]
