"""The prepared device run's dry run on the CPU (scripts/device_check.sh, PLAN=quick, issue 40): the
lever grid and a constrained step, 1 vs 2 jobs on one device, then two methods and the probes (real
tokenizers, long context, batch invariance) on one tiny shape; and its time limits."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_device_check_dry_run_on_cpu(tmp_path, locomo_path):
    env = {**os.environ, "DEVICE": "cpu", "METHODS": "full_context,scgmem", "PROBES": "real,long,invariance",
           "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels"), "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", "scripts/device_check.sh", str(tmp_path / "out")], cwd=ROOT, env=env, check=True,
                   timeout=480)
    throughput = json.loads((tmp_path / "out" / "throughput.json").read_text())  # phase 1: levers, first
    [shape] = throughput["shapes"]
    assert shape["shape"] == "tiny" and "batches" not in shape or not shape["batches"]  # --levers-only
    for attention in ("sdpa", "gqa_sdpa"):
        for mode in ("eager", "static"):
            cells = shape["levers"][attention][mode]
            assert set(cells) == {"24x1", "24x2", "64x1", "64x2"}, cells
            assert all(c["step_ms"] >= 0 and c["first_call_s"] > 0 for c in cells.values())
    assert shape["levers"]["gqa_sdpa"]["static"]["24x2"]["static_decode"]["cache_builds"] >= 1
    constrained = shape["constrained"]
    assert constrained["concepts"] > 0
    for kind in ("greedy", "beam"):
        assert constrained[kind]["steps"] >= 1 and constrained[kind]["processor_ms_per_step"] > 0
    shared = json.loads((tmp_path / "out" / "gpu_shared.json").read_text())  # phase 2: 1 vs 2 jobs
    assert [r["jobs"] for r in shared["runs"]] == [1, 2] and shared["runs"][0]["speedup"] == 1.0
    for run in shared["runs"]:
        assert len(run["per_job"]) == run["jobs"] and run["tokens_per_s"] > 0
        assert len({job["generated_tokens"] for job in run["per_job"]}) == 1  # same prompts, weights, greedy
        assert {job["placement"]["job_num"] for job in run["per_job"]} == set(range(run["jobs"]))
        assert all(job["oom"] == {"splits": 0, "rows_split": 0} for job in run["per_job"])
    result = json.loads((tmp_path / "out" / "tiny.json").read_text())  # phase 3: the methods
    assert result["hidden_size"] == 64 and result["environment"]["device"] == "cpu"
    for method in ("full_context", "scgmem"):
        entry = result["methods"][method]
        assert entry["ok"] is True, entry.get("traceback")
        assert entry["n_questions"] > 0 and entry["generate_calls"] > 0 and entry["mean_rows_per_generate"] >= 1
        assert entry["prefill_tokens_per_s"] > 0 and entry["decode_tokens_per_s"] > 0
        assert entry["same_model"] is True
        assert entry["repetition_penalty"] == [1.0]  # the saved model's 1.05 was neutralised
    probes = json.loads((tmp_path / "out" / "probes.json").read_text())
    for name in ("real_tokenizers", "long_context", "batch_invariance"):
        assert probes[name].get("ok", True) is not False, probes[name].get("traceback")
    real = probes["real_tokenizers"]
    assert real["llama3.2"]["ok"] and real["llama3.2"]["eos_ids"] == [128001, 128008, 128009]
    assert real["qwen2.5"]["ok"] and (real["qwen2.5"]["tokens"], real["qwen2.5"]["score_columns"]) == (151665, 151936)
    assert probes["long_context"]["rows"] >= 1 and probes["long_context"]["decode_ms_per_step"] > 0
    assert 0 <= probes["batch_invariance"]["row_agreement"] <= 1


def test_device_check_timeouts_fit_eight_minutes():
    """Each step runs under `timeout N`. The quick plan (install, levers, 1 vs 4 jobs, methods) adds up
    to at most 480 s, so the machine's start and a rerun fit a 15-minute lease (issue 40); the full
    plan (install, every method on four shapes) too."""
    text = (ROOT / "scripts" / "device_check.sh").read_text()
    full, quick = text.split('if [ "$PLAN" = full ]; then')[1].split("\nfi\n", 1)
    limits = lambda part: [int(n) for line in part.splitlines()  # noqa: E731
                           for n in re.findall(r"(?<![-\w])timeout (\d+)", line.split("#")[0])]
    install = limits(text.split('if [ "$PLAN" = full ]')[0])
    assert len(install) == 1 and len(limits(quick)) == 3 and len(limits(full)) == 1
    assert sum(install + limits(quick)) <= 480 and sum(install + limits(full)) <= 480, (install, quick, full)


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
