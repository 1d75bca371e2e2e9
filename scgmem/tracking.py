"""Experiment tracking. `logger=none` (default) logs nothing; `logger=wandb` see scgmem/wandb_logger.py."""
from __future__ import annotations

from pathlib import Path


class NullLogger:
    """Tracks nothing; the run's files are the record."""

    def log_run(self, config: dict, summary: dict, run_dir: Path) -> None:
        return None
