"""predictions.jsonl: appended one line per scored question, read back on resume.

A run killed mid-write leaves at most one partial last line; `read_predictions` drops it
(and truncates the file to the last complete line) so the rerun rewrites that question.
"""
from __future__ import annotations

import json
import logging
import os
import uuid
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


USAGE_LOG = "usage.jsonl"


def add_counts(total: dict, part: dict) -> dict:
    """Add the {name: n} counts of `part` into `total` (returned, for sums into a fresh dict)."""
    for k, n in part.items():
        total[k] = total.get(k, 0) + int(n)
    return total


def add_usage(total: dict, part: dict) -> None:
    """Add the {phase: {counter: n}} counts of `part` into `total`."""
    for phase, counts in part.items():
        add_counts(total.setdefault(phase, {}), counts)


class UsageLog:
    """usage.jsonl: the question-side LLM usage (recall, answer: every phase but ingest) of every
    process that wrote records to a run directory.

    A process appends, after each chunk of records it writes, its running totals: `run` names the
    process, `questions` counts the records it wrote, `usage` its counts, `deviations` the method
    deviations its answering added (a method's counters live in the method object, which a resume
    rebuilds from the memory, so answer-time counts of earlier attempts would be lost without it).
    A resumed run reads the last line of each earlier process, so summary.json's tokens and
    deviations cover the records of every attempt, not only those of the last one. Records written by code older than this log have no line:
    summary.json's `tokens_questions` says how many records the tokens cover.
    """

    def __init__(self, path: Path, *, resumed: bool) -> None:
        self.path = Path(path)
        self.run = uuid.uuid4().hex[:12]
        self.prior_usage: dict = {}
        self.prior_deviations: dict[str, int] = {}
        self.prior_questions = 0
        if not resumed:  # no records yet: lines left from a deleted predictions.jsonl count nothing
            self.path.unlink(missing_ok=True)
            return
        last: dict[str, dict] = {}
        if self.path.is_file():
            for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    entry = json.loads(line)
                    last[str(entry["run"])] = {"questions": int(entry["questions"]), "usage": dict(entry["usage"]),
                                               "deviations": dict(entry.get("deviations") or {})}
                except (ValueError, KeyError, TypeError):
                    log.warning("%s: line %d is not a usage entry; skipped", self.path, number)
        for entry in last.values():
            self.prior_questions += entry["questions"]
            add_usage(self.prior_usage, entry["usage"])
            add_counts(self.prior_deviations, entry["deviations"])

    def append(self, questions: int, usage: dict, deviations: dict[str, int] | None = None) -> None:
        entry = {"run": self.run, "questions": questions, "usage": usage, "deviations": deviations or {}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def total(self, questions: int, usage: dict) -> tuple[int, dict]:
        """(records covered, usage) of every attempt, this process's `questions` and `usage` included."""
        out: dict = {}
        add_usage(out, self.prior_usage)
        add_usage(out, usage)
        return self.prior_questions + questions, out


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON via a temp file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
