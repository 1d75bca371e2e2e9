"""Issue 42, two runs in one run directory: the second refuses in one line naming the holder, and
changes nothing of the first's files (scgmem/harness/run_lock.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.harness.untrusted_support import DATA, FAST, ROOT, one_line_error, scgmem_run

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")

HOLD = """
import sys, time
from pathlib import Path
from scgmem.harness.run_lock import run_dir_lock
with run_dir_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding tmp_path/run, as a running scgmem-run does."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield run_dir, proc.pid
    proc.kill()
    proc.wait()


def test_a_second_lock_in_another_process_refuses_naming_the_holder(holder):
    from scgmem.harness.run_lock import RunDirLocked, run_dir_lock

    run_dir, pid = holder
    with pytest.raises(RunDirLocked) as e:
        with run_dir_lock(run_dir):
            pass
    assert f"pid {pid}" in str(e.value) and "\n" not in str(e.value)


def test_a_second_scgmem_run_refuses_and_leaves_the_directory_as_it_was(holder):
    run_dir, pid = holder
    (run_dir / "predictions.jsonl").write_text("")  # the first run's files so far
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    line = one_line_error(scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}"))
    assert f"pid {pid}" in line and ".run.lock" in line
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert after == before and not (run_dir / ".hydra").exists() and not (run_dir / "run.log").exists()


def test_the_lock_is_released_when_the_run_ends(tmp_path):
    run_dir = tmp_path / "run"
    assert scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}").returncode == 0
    from scgmem.harness.run_lock import run_dir_lock

    with run_dir_lock(run_dir):  # free again: a resume may start
        pass


def test_a_killed_holder_releases_the_lock(tmp_path):
    from scgmem.harness.run_lock import run_dir_lock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    proc.kill()
    proc.wait()
    deadline = time.time() + 10
    while True:
        try:
            with run_dir_lock(run_dir):
                break
        except ValueError:
            assert time.time() < deadline
            time.sleep(0.1)


def test_a_lock_file_that_is_a_symlink_is_refused(tmp_path):
    from scgmem.harness.run_lock import run_dir_lock
    from scgmem.harness.safe_files import UnsafeLink

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink(victim, run_dir / ".run.lock")
    with pytest.raises(UnsafeLink):
        with run_dir_lock(run_dir):
            pass
    assert victim.read_text() == "keep me\n"
