"""A killed multirun sweep resumes: the same command again continues every job in its own folder,
no question is answered twice, and a speed-only setting may change on the way (issue 32)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.test_run_e2e import ROOT, comparable, records, scgmem_run

SWEEP = ["-m", "method=last_turns", "method.k=3,5", "data.samples=[conv-26]", "data.questions_per_category=2",
         "run.progress=false"]


def job_dirs(sweep: Path) -> list[Path]:
    return sorted(p.parent for p in sweep.rglob("run.json"))


def kill_when(sweep: Path, args: list[str], lines: int) -> None:
    """Run the sweep and SIGKILL it once its first job has written `lines` predictions."""
    proc = subprocess.Popen([sys.executable, "-m", "scgmem.run", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        preds = list(sweep.rglob("predictions.jsonl"))
        if preds and preds[0].read_text().count("\n") >= lines:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow  # three runs of the embedded model: minutes on a shared CPU
def test_a_killed_sweep_resumes_every_job_without_answering_twice(tmp_path):
    sweep = tmp_path / "sweep"
    first = [*SWEEP, "run.answer_batch_size=1", f"hydra.sweep.dir={sweep}"]
    kill_when(sweep, first, lines=3)
    [killed] = job_dirs(sweep)  # the second job had not started
    before = records(killed)
    assert 3 <= len(before) < 8, "the sweep should have been killed part-way through its first job"
    # The same command, with a speed-only setting changed: both jobs resume in their own folders.
    scgmem_run(*SWEEP, "run.answer_batch_size=2", f"hydra.sweep.dir={sweep}")
    jobs = job_dirs(sweep)
    assert len(jobs) == 2 and killed in jobs
    for job in jobs:
        recs = records(job)
        assert len({(r["sample_id"], r["qa_index"]) for r in recs}) == len(recs) == 8, job
    kept = {(r["sample_id"], r["qa_index"]): r for r in records(killed)}
    for r in before:  # answered before the kill and kept as written, not answered again
        assert kept[(r["sample_id"], r["qa_index"])] == r
    run = json.loads((killed / "run.json").read_text())
    assert [c["to"] for c in run["speed_changes"]] == [{"run.answer_batch_size": 2}]
    # and the resumed job's answers are those of an uninterrupted run
    whole = tmp_path / "whole"
    scgmem_run("method=last_turns", "method.k=3", "data.samples=[conv-26]", "data.questions_per_category=2",
               "run.progress=false", f"hydra.run.dir={whole}")
    k3 = next(j for j in jobs if "k=3" in str(j))
    assert comparable(records(k3)) == comparable(records(whole))
