"""One process at a time writes a run directory: `<run dir>/.run.lock`.

Two runs in one directory would interleave their predictions (8 records for 4 questions), so the
runner holds an OS lock on `.run.lock` (fcntl.flock: a killed process releases it) from before it
reads the directory until it exits. A second run does not wait: it refuses in one line naming the
holder (pid, host and start time, written into the lock file by the holder), exit 2. The lock file
stays after the run (removing it would let a third process lock a new file while the second still
holds the old one); it is never followed if it is a symlink.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from scgmem.harness.safe_files import UnsafeLink, open_fd
from scgmem.harness.untrusted import StoredFileError

LOCK_NAME = ".run.lock"


class RunDirLocked(StoredFileError):
    """Another process holds the run directory; str(e) is the one line naming it."""


def _holder(fd: int) -> str:
    """What the holder wrote into the lock file, shown short (it is untrusted text)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096) or b"{}")
        return f"pid {int(info['pid'])} on {str(info['host'])[:64]} since {str(info['since'])[:32]}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (no holder recorded yet)"


def probe_run_dir_lock(run_dir: Path) -> None:
    """Raise RunDirLocked when another process holds `run_dir` now; take nothing. Hydra's log setup
    calls it (scgmem/harness/run_log.py), before Hydra rewrites the directory's .hydra/ files."""
    with run_dir_lock(run_dir, record=False):
        pass


@contextlib.contextmanager
def run_dir_lock(run_dir: Path, record: bool = True):
    """Hold `<run_dir>/.run.lock` for the body; raise RunDirLocked at once when another process holds it.
    `record`: write this process as the holder into the file."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = open_fd(path, os.O_RDWR | os.O_CREAT)  # a FIFO in its place is refused, never waited on
    except UnsafeLink:
        raise UnsafeLink(path, "symlink", os.readlink(path), "the harness writes this file itself; remove the link") \
            from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirLocked(path, "holder", _holder(fd), "another scgmem-run is writing this run directory; wait "
                               "for it to finish or use another hydra.run.dir") from None
        if record:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                      "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the flock
