"""Reading requests.jsonl back (scgmem/llm/served/recorder.py) as untrusted input, and what the
recorded requests say about the run: its tokens/s and in-flight profile, and its causal graph's
critical path.

`read_records` checks every field it hands on, one line naming file, line and field on the first
bad one (`BadRecord`, a ValueError): numbers finite and in range, ints not bools, end >= start, a
path that is a plain absolute path on the server (never `@host`, `//host`, a scheme or `..`: a
replay sends it only to the URL its user names), ids unique and parents named before they are used
(the recorder writes a request after its reply, so its parents' lines come first; a file that
breaks this is refused, which also rules out cycles).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Callable

MAX_LINE = 64 << 20  # bytes of one record: far above any prompt the harness sends
MAX_COUNT = 1 << 40  # tokens of one request
MAX_EPOCH = 1e11  # seconds since the epoch (year 5138): a start or end beyond is not a clock's
PATH = re.compile(r"/[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_\-.]+)*")  # /v1/completions, /completion, /generate
ID = re.compile(r"[A-Za-z0-9_\-./#]{1,300}")


class BadRecord(ValueError):
    """A record that cannot be used; str(e) is the one line."""


def _number(rec: dict, key: str, where: str) -> float:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value < MAX_EPOCH:
        raise BadRecord(f"{where}: field {key}: not a time in seconds since the epoch ({str(value)[:40]})")
    return float(value)


def _count(rec: dict, key: str, where: str) -> int | None:
    value = rec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_COUNT:
        raise BadRecord(f"{where}: field {key}: not a token count ({str(value)[:40]})")
    return value


def check_record(rec, where: str, known: set[str]) -> dict:
    """The fields of one record, checked (module docstring); `known`: the ids of earlier lines."""
    if not isinstance(rec, dict):
        raise BadRecord(f"{where}: not a request record (a JSON object)")
    version = rec.get("v")
    if isinstance(version, bool) or version not in (1, 2):
        raise BadRecord(f"{where}: field v: unknown record version {str(version)[:20]}")
    if not isinstance(rec.get("body"), dict):
        raise BadRecord(f"{where}: field body: not an object")
    path = rec.get("path")
    if not isinstance(path, str) or not PATH.fullmatch(path) or ".." in path:
        raise BadRecord(f"{where}: field path: not a plain path on the server ({str(path)[:60]!r})")
    start, end = _number(rec, "start", where), _number(rec, "end", where)
    if end < start:
        raise BadRecord(f"{where}: field end: {end} is before start {start}")
    out = {**rec, "start": start, "end": end, "prompt_tokens": _count(rec, "prompt_tokens", where),
           "completion_tokens": _count(rec, "completion_tokens", where)}
    if version == 1:
        return {**out, "id": None, "parents": None, "session": 0}
    rid, parents, session = rec.get("id"), rec.get("parents"), rec.get("session")
    if not isinstance(rid, str) or not ID.fullmatch(rid) or rid in known:
        raise BadRecord(f"{where}: field id: not a new request id ({str(rid)[:60]!r})")
    if not isinstance(parents, list) or not all(isinstance(p, str) and p in known for p in parents) \
            or len(set(parents)) != len(parents):
        raise BadRecord(f"{where}: field parents: each must name an earlier request, once")
    if isinstance(session, bool) or not isinstance(session, int) or not 0 <= session < 1 << 20:
        raise BadRecord(f"{where}: field session: not a session number ({str(session)[:20]})")
    return {**out, "session": session}


def read_records(path: Path, opener: Callable[[Path], object] | None = None) -> list[dict]:
    """requests.jsonl's records, checked (module docstring). `opener(path)` returns a binary file
    (bench_replay passes one that follows no link and opens no FIFO)."""
    out, known = [], set()
    with (opener or (lambda p: open(p, "rb")))(path) as f:
        n = 0
        while line := f.readline(MAX_LINE + 1):
            n += 1
            where = f"{path}:{n}"
            if len(line) > MAX_LINE:
                raise BadRecord(f"{where}: a record over {MAX_LINE} bytes")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, an int of too many digits, too deep
                raise BadRecord(f"{where}: not JSON ({str(e)[:80]})") from None
            rec = check_record(rec, where, known)
            if rec["id"] is not None:
                known.add(rec["id"])
            out.append(rec)
    return out


def tokens(rec: dict) -> int:
    return (rec.get("prompt_tokens") or 0) + (rec.get("completion_tokens") or 0)


def run_profile(records: list[dict], pause_s: float | None = None) -> dict:
    """Tokens/s of the run as recorded, and how many of its requests were in flight.

    A pause of the run (a crash and its resume, a machine restart) is not engine time it left idle:
    the gap before the first request of a new recording session (the recorder's `session`) is cut
    out of the span, and so is, with `pause_s`, any stretch longer than `pause_s` with no request in
    flight (records without sessions); both are reported as `paused_s`."""
    start, end = min(r["start"] for r in records), max(r["end"] for r in records)
    busy, paused, last, session = 0.0, 0.0, start, None  # union of the request intervals; the pauses between
    for r in sorted(records, key=lambda r: r["start"]):
        gap = r["start"] - last
        resumed = session is not None and r.get("session", 0) > session
        if gap > 0 and (resumed or (pause_s is not None and gap > pause_s)):
            paused += gap
        session = max(session or 0, r.get("session", 0))
        if r["end"] > last:
            busy += r["end"] - max(r["start"], last)
            last = r["end"]
    span = max(end - start - paused, 1e-9)
    total = sum(tokens(r) for r in records)
    out = {"requests": len(records), "tokens": total,
           "prompt_tokens": sum(r.get("prompt_tokens") or 0 for r in records),
           "completion_tokens": sum(r.get("completion_tokens") or 0 for r in records),
           "span_s": round(span, 3), "tokens_per_s": round(total / span, 2),
           "mean_in_flight": round(sum(r["end"] - r["start"] for r in records) / span, 3),
           "busy_share": round(busy / span, 4)}
    if pause_s is not None or paused:
        out["paused_s"] = round(paused, 3)
    return out


def has_graph(records: list[dict]) -> bool:
    """Whether every record names its parents (version 2): a causal replay needs them."""
    return bool(records) and all(r.get("id") is not None for r in records)


def parent_indices(records: list[dict]) -> list[list[int]]:
    """For each record, the positions of its parents (earlier in the list: `read_records` checks it)."""
    at = {r["id"]: i for i, r in enumerate(records)}
    return [[at[p] for p in r["parents"]] for r in records]


def critical_path(records: list[dict]) -> dict:
    """The longest chain of dependent requests: in requests, in tokens, and in the run's own
    request seconds (the chain's engine time at the speed the run saw)."""
    parents = parent_indices(records)
    best = {"requests": [0] * len(records), "tokens": [0] * len(records), "seconds": [0.0] * len(records)}
    for i, (r, ps) in enumerate(zip(records, parents)):
        own = {"requests": 1, "tokens": tokens(r), "seconds": r["end"] - r["start"]}
        for key, row in best.items():
            row[i] = own[key] + max((row[p] for p in ps), default=0)
    roots = sum(1 for ps in parents if not ps)
    return {"requests": max(best["requests"], default=0), "tokens": max(best["tokens"], default=0),
            "request_seconds": round(max(best["seconds"], default=0.0), 3), "roots": roots,
            "total_requests": len(records)}
