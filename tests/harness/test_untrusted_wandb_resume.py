"""Issue 48: wandb's own links do not break a resume. With logger=wandb (offline, WANDB_DIR unset)
wandb writes links into <run dir>/wandb/ (`latest-run`, `debug.log`, `debug-internal.log`,
`logs/debug-core.log`, the last pointing into ~/.cache/wandb); the symlink rule refused them and the
same command could not resume. A run killed part-way resumes with the same command; any other link
leading outside is still refused, and so is a FIFO in place of the run lock or predictions.jsonl."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.untrusted_support import DATA, FAST, ROOT, RUNNER, lines, one_line_error, scgmem_run

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")
ENV = {"WANDB_MODE": "offline", "WANDB_DIR": "", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}


def _env():
    env = {**os.environ, **ENV}
    env.pop("WANDB_DIR")  # wandb's default: <run dir>/wandb, beside the harness's files
    return env


def test_a_wandb_run_killed_part_way_resumes_with_the_same_command(tmp_path):
    run_dir = tmp_path / "run"
    args = [*FAST, "method=full_context", "data.questions_per_category=2", "run.answer_batch_size=1", "logger=wandb",
            f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, *args], cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pred, deadline = run_dir / "predictions.jsonl", time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if pred.is_file() and pred.read_text().count("\n") >= 1:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # wandb's own service process goes too
    proc.wait(timeout=30)
    links = [p for p in (run_dir / "wandb").rglob("*") if p.is_symlink()]
    assert links, "wandb wrote no link: the case of issue 48 did not arise"
    done = len(lines(pred))
    assert done >= 1
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the kill can land after the last record on a quiet machine: the resume then writes none, but it
    # must still accept wandb's own links and finish (the defect was a refusal here)
    assert len(lines(pred)) >= done and (run_dir / "summary.json").is_file()


def test_another_link_leading_outside_is_still_refused(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "wandb").mkdir(parents=True)
    (run_dir / "wandb" / "notes.txt").symlink_to(tmp_path)
    proc = scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}")
    assert "notes.txt: symlink" in one_line_error(proc) and "leads outside the run directory" in proc.stderr


@pytest.mark.parametrize("name", ["predictions.jsonl", ".run.lock"])
def test_a_fifo_in_the_run_directory_is_one_line_not_a_hang(tmp_path, name):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / name)
    proc = scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}")  # bounded: subprocess timeout 300 s
    line = one_line_error(proc)
    assert f"{name}: file: 'a FIFO'" in line
    assert Path(run_dir / name).exists()  # left for the user to see
