"""A client-side record of every request a served model sends (`model.record_requests: true`).

One JSON line per HTTP request, written to the run directory's requests.jsonl
(`OpenAICompatibleLLM.record_requests_to`), version 2:

- `id` and `parents`: the request's name in the run's causal graph and the requests whose replies
  its thread of control had seen when it was sent (scgmem/llm/causal.py: the job's last reply, the
  fork and join of `llm.map` and of the backend's own threads; a conversation's first request has
  none). Names depend only on the program, so the graph is the same at any `model.max_in_flight`;
- `session`: 0 for the first process that wrote the file, +1 for each resume (ids of a resumed
  session carry the prefix `<session>/`), so a replay knows where the run paused;
- `server`, `path`, `body` and `reply` (what was sent and what came back: the content-replay server
  answers with it), wall-clock `start` and `end` (seconds since the epoch, the slot of
  `model.max_in_flight` held), and the prompt and completion token counts the reply states.

`python -m scripts.bench_replay <run_dir> --url ...` re-sends them (scgmem/llm/served/request_profile.py
reads the graph). requests.jsonl is a run file like the others: the pipeline opens it without following
links and refuses special files (`opener`), and a resume first cuts a torn last line.

Token counts, read from the reply as each engine states them:
- an OpenAI-style `usage` (vLLM, SGLang, llama.cpp's /v1 routes): prompt_tokens / completion_tokens;
- llama.cpp's native /completion: tokens_evaluated / tokens_predicted;
- SGLang's native /generate: meta_info.prompt_tokens / completion_tokens;
- otherwise the length of a prompt sent as token ids, and no completion count (null).
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Callable

from scgmem.llm import causal

log = logging.getLogger(__name__)

RECORD_VERSION = 2


def reply_tokens(body: dict, reply) -> tuple[int | None, int | None]:
    """(prompt tokens, completion tokens) of one request, as the reply states them (module docstring)."""
    def count(value):
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else None

    replies = reply if isinstance(reply, list) else [reply]  # SGLang's /generate answers a list for a batch
    prompt = completion = None
    for r in replies:
        if not isinstance(r, dict):
            continue
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else r.get("meta_info") or {}
        p = count(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
        c = count(usage.get("completion_tokens")) if isinstance(usage, dict) else None
        p = p if p is not None else count(r.get("tokens_evaluated"))
        c = c if c is not None else count(r.get("tokens_predicted"))
        prompt = p if prompt is None else prompt + (p or 0)
        completion = c if completion is None else completion + (c or 0)
    if prompt is None and isinstance(body.get("prompt"), list) and all(isinstance(t, int) for t in body["prompt"]):
        prompt = len(body["prompt"])
    return prompt, completion


def _cut_torn_tail(fd: int, path: Path) -> int:
    """Cut a last line without its newline (a run killed mid-write) and return the file's size."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    at = size
    while at > 0:
        chunk = os.pread(fd, min(at, 1 << 16), max(0, at - (1 << 16)))
        at -= len(chunk)
        if (nl := chunk.rfind(b"\n")) >= 0:
            at += nl + 1
            break
    log.warning("%s: cut a torn last line (%d bytes) before appending", path, size - at)
    os.ftruncate(fd, at)
    return at


def _last_session(fd: int, size: int) -> int | None:
    """The `session` of the file's last record, or None (no record, or one without a session)."""
    tail = os.pread(fd, min(size, 1 << 22), max(0, size - (1 << 22)))
    last = tail.rstrip(b"\n").rpartition(b"\n")[2]
    try:
        session = json.loads(last).get("session") if last else None
    except (ValueError, AttributeError, RecursionError):
        return None
    return session if isinstance(session, int) and not isinstance(session, bool) and 0 <= session < 1 << 20 else None


class RequestRecorder:
    """Appends one line per request to `path` (thread-safe; lines whole, flushed as written).

    `opener(path, flags) -> fd`: how the file is opened (the pipeline passes
    `scgmem.harness.safe_files.open_fd`: no links, no FIFOs); default os.open."""

    def __init__(self, path: Path, opener: Callable[[Path, int], int] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = (opener or (lambda p, flags: os.open(p, flags, 0o644)))(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            size = _cut_torn_tail(fd, self.path)
            last = _last_session(fd, size) if size else None
            self.session = 0 if size == 0 else (last + 1 if last is not None else 1)
        except BaseException:
            os.close(fd)
            raise
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.count = 0

    def record(self, *, path: str, body: dict, reply, server: str, start: float, end: float) -> None:
        """One request whose reply just arrived, on the calling thread's causal strand."""
        prompt, completion = reply_tokens(body, reply)
        rid, parents = causal.current().next_request()
        if self.session:
            rid, parents = f"{self.session}/{rid}", [f"{self.session}/{p}" for p in parents]
        line = json.dumps({"v": RECORD_VERSION, "id": rid, "parents": parents, "session": self.session,
                           "server": server, "path": path, "start": round(start, 6), "end": round(end, 6),
                           "prompt_tokens": prompt, "completion_tokens": completion, "body": body, "reply": reply},
                          separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()
