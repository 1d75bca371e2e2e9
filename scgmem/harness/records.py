"""predictions.jsonl and usage.jsonl: appended one line per scored question (per chunk), read back on resume.

A run killed mid-write leaves at most one partial last line; `read_jsonl` drops it (and truncates
the file to the last complete line) so the rerun rewrites that question. A write that fails (a
full disk) cuts the file back itself. Any other line that is not what the harness writes is
refused in one line (`untrusted.StoredFileError`). `write_json_atomic` lives in safe_files and is
re-exported here, where its callers import it.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from pathlib import Path

from scgmem.harness.safe_files import UnsafeLink, open_nofollow, read_bounded, write_json_atomic  # noqa: F401
from scgmem.harness.untrusted import StoredFileError, need_counts, need_int, need_usage, parse_json

log = logging.getLogger(__name__)


# Larger than any run writes (all of LoCoMo with long replies is a few MB per file): a stray file
# is refused, not read into memory.
MAX_JSONL_BYTES = 1 << 30


def read_jsonl(path: Path, required: dict[str, type] | None = None, cut: bool = True) -> list[dict]:
    """The complete lines of `path` as JSON objects (empty if absent). A last line without its
    newline was cut by a crash: it is dropped and (`cut`) cut off the file, so the rerun rewrites
    it; a caller that checks the records further passes cut=False and calls `cut_partial_line` once
    they pass. Any complete line that is not a JSON object holding `required` {field: type} is
    refused in one line (`StoredFileError`); nothing is truncated then, so no line is lost."""
    if not os.path.lexists(path):  # a FIFO or a link is refused by read_bounded, never taken for absent
        return []
    data = read_bounded(path, MAX_JSONL_BYTES)
    lines = data.split(b"\n")
    partial = lines.pop()  # b"" when the file ends with a newline
    records = []
    for number, line in enumerate(lines, 1):
        obj = parse_json(line, path, field=f"line {number}")
        if not isinstance(obj, dict):
            raise StoredFileError(path, f"line {number}", obj, "must be a JSON object")
        for name, kind in (required or {}).items():
            value = obj.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise StoredFileError(path, f"line {number}: field {name!r}", value,
                                      f"missing or not {kind.__name__}")
        records.append(obj)
    if partial and cut:
        cut_partial_line(path)
    return records


def cut_partial_line(path: Path) -> None:
    """Cut a last line without its newline (a write a crash interrupted) off `path`."""
    if not path.is_file():
        return
    with open_nofollow(path, "r+b") as f:
        data = f.read(MAX_JSONL_BYTES + 1)
        end = data.rfind(b"\n") + 1
        if end < len(data):
            log.warning("%s: discarding %d bytes of a partly written last line", path, len(data) - end)
            f.truncate(end)


def read_predictions(path: Path, cut: bool = True) -> list[dict]:
    """predictions.jsonl (or judgements.jsonl) read back: `read_jsonl` with `sample_id` and `qa_index`
    required. What each record must match is checked by `scgmem.harness.stored_records`."""
    return read_jsonl(path, {"sample_id": str, "qa_index": int}, cut)


class PredictionWriter:
    """Appends records and makes each chunk durable before the next one starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_nofollow(path, "a")

    def write(self, records: list[dict]) -> None:
        append_lines(self._file, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), self.path)

    def close(self) -> None:
        self._file.close()


def append_lines(f, text: str, path: Path | None = None) -> None:
    """Append `text` to the open file `f` (at `path`) and make it durable; when the write fails (a
    full disk), cut the file back to where it was, so no partial line stays behind."""
    f.seek(0, os.SEEK_END)
    start = f.tell()
    try:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    except BaseException as e:
        with contextlib.suppress(OSError, ValueError):
            os.ftruncate(f.fileno(), start)
        if isinstance(e, OSError) and e.filename is None and path is not None:
            e.filename = str(path)  # the one-line error names the file
        raise


USAGE_LOG = "usage.jsonl"
# Above any count one run makes (a token count of all of LoCoMo is ~1e8): a larger one is forged.
MAX_COUNT = 10**12


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

    def __init__(self, path: Path, *, records: int) -> None:
        """`records`: how many records predictions.jsonl holds (0: a fresh run, any old lines are dropped)."""
        self.path = Path(path)
        self.run = uuid.uuid4().hex[:12]
        self.prior_usage: dict = {}
        self.prior_deviations: dict[str, int] = {}
        self.prior_questions = 0
        if not records:  # no records yet: lines left from a deleted predictions.jsonl count nothing
            if self.path.is_symlink():
                raise UnsafeLink(self.path, "symlink", os.readlink(self.path), "the harness writes this file itself")
            self.path.unlink(missing_ok=True)
            return
        last: dict[str, dict] = {}
        for number, entry in enumerate(read_jsonl(self.path, cut=False), 1):
            last[usage_entry(entry, self.path, f"line {number}")] = entry
        for entry in last.values():
            self.prior_questions += entry["questions"]
            add_usage(self.prior_usage, entry["usage"])
            add_counts(self.prior_deviations, entry.get("deviations") or {})
        if self.prior_questions > records:  # each process counts the records it wrote, after writing them
            raise StoredFileError(self.path, "questions", self.prior_questions,
                                  f"more records than predictions.jsonl holds ({records})")
        cut_partial_line(self.path)  # checked: now the next append starts a line of its own

    def append(self, questions: int, usage: dict, deviations: dict[str, int] | None = None) -> None:
        entry = {"run": self.run, "questions": questions, "usage": usage, "deviations": deviations or {}}
        with open_nofollow(self.path, "a") as f:
            append_lines(f, json.dumps(entry) + "\n", self.path)

    def total(self, questions: int, usage: dict) -> tuple[int, dict]:
        """(records covered, usage) of every attempt, this process's `questions` and `usage` included."""
        out: dict = {}
        add_usage(out, self.prior_usage)
        add_usage(out, usage)
        return self.prior_questions + questions, out


def usage_entry(entry: dict, path, where: str) -> str:
    """The `run` of one usage.jsonl line, after checking the line is what `UsageLog.append` writes."""
    run = entry.get("run")
    if not isinstance(run, str) or not 1 <= len(run) <= 64:
        raise StoredFileError(path, f"{where}: field 'run'", run, "must be a string of 1-64 characters")
    need_int(entry.get("questions"), path, f"{where}: field 'questions'", 0, 10**9)
    need_usage(entry.get("usage"), path, f"{where}: field 'usage'", MAX_COUNT)
    if entry.get("deviations") is not None:
        need_counts(entry["deviations"], path, f"{where}: field 'deviations'", MAX_COUNT)
    return run
