"""scripts/bench_gpu_shared.py's CPU dry run: 1 and 2 jobs at once, each its own process placed as
the harness places it, write one JSON with the aggregate throughput of each (issue 29, lever 3)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_measures_one_and_two_jobs(tmp_path, locomo_path):
    proc = subprocess.run([sys.executable, "-m", "scripts.bench_gpu_shared", "--out", str(tmp_path),
                           "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                               "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_shared.json").read_text())
    assert [r["jobs"] for r in report["runs"]] == [1, 2] and report["runs"][0]["speedup"] == 1.0
    for run in report["runs"]:
        assert len(run["per_job"]) == run["jobs"] and run["tokens_per_s"] > 0
        # each job generated the same tokens: same prompts, same weights, greedy
        assert len({job["generated_tokens"] for job in run["per_job"]}) == 1
        assert {job["placement"]["job_num"] for job in run["per_job"]} == set(range(run["jobs"]))
        assert all(job["oom"] == {"splits": 0, "rows_split": 0} for job in run["per_job"])
