"""predictions.jsonl: appended one line per scored question, read back on resume.

A run killed mid-write leaves at most one partial last line; `read_predictions` drops it
(and truncates the file to the last complete line) so the rerun rewrites that question.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def read_predictions(path: Path) -> list[dict]:
    """Complete records of `path` (empty if absent); a partial last line is cut off the file."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    records, good_end = [], 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good_end += len(line)
    if good_end < len(data):
        log.warning("%s: discarding %d bytes of a partly written last line", path, len(data) - good_end)
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return records


class PredictionWriter:
    """Appends records and makes each chunk durable before the next one starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "a", encoding="utf-8")

    def write(self, records: list[dict]) -> None:
        self._file.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON via a temp file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
