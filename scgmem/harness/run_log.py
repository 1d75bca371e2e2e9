"""run.log, opened for Hydra: the earliest point where the harness sees a run directory.

Hydra creates the run directory, sets up its job logging (this handler: configs/hydra/default.yaml,
`job_logging.handlers.file.class`), and only then writes `.hydra/config.yaml`, `hydra.yaml` and
`overrides.yaml` with a plain open(), before any code of the harness runs. So this handler, before
it opens run.log,

- refuses a run directory holding a planted symlink (`safe_files.check_run_dir_links`): Hydra's
  `.hydra/` writes would otherwise follow it;
- refuses a run directory another scgmem-run holds (`run_lock.probe_run_dir_lock`), so a second run
  neither appends to run.log nor rewrites `.hydra/`;

each in one line, exit 2; and it opens run.log with O_NOFOLLOW. What it cannot control: a link
planted between this check and Hydra's writes, the folder Hydra's `mkdir` makes (the run directory
itself may be a link: the user chose it), and a user's own `hydra/job_logging` that replaces this
handler (the runner repeats both checks before it reads or writes anything, after Hydra's writes).
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from scgmem.harness.run_lock import probe_run_dir_lock
from scgmem.harness.safe_files import check_run_dir_links, open_fd
from scgmem.harness.untrusted import StoredFileError


class RunLogHandler(logging.FileHandler):
    """logging.FileHandler for `<run dir>/run.log` that checks the run directory first (module docstring)."""

    def __init__(self, filename, mode: str = "a", encoding: str | None = None, delay: bool = False,
                 errors: str | None = None) -> None:
        run_dir = Path(filename).parent
        try:
            check_run_dir_links(run_dir)
            probe_run_dir_lock(run_dir)
        except StoredFileError as e:
            if os.environ.get("HYDRA_FULL_ERROR") == "1" or os.environ.get("SCGMEM_DEBUG") == "1":
                raise
            # SystemExit passes through logging's and Hydra's handlers (they catch Exception only)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        super().__init__(filename, mode, encoding, delay, errors)

    def _open(self):
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in self.mode else os.O_TRUNC)
        return os.fdopen(open_fd(Path(self.baseFilename), flags), self.mode, encoding=self.encoding,
                         errors=self.errors)
