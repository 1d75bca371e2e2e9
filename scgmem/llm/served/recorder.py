"""A client-side record of every request a served model sends (`model.record_requests: true`).

One JSON line per HTTP request, written to the run directory's requests.jsonl
(`OpenAICompatibleLLM.record_requests_to`): the path and body sent (enough to send it again), the
server it went to, wall-clock start and end (seconds since the epoch, the slot of
`model.max_in_flight` held), and the prompt and completion token counts the reply states.
`python -m scripts.bench_replay <run_dir> --url ...` re-sends them with no dependencies, which
bounds what the engine can do for this exact mix of requests (docs/performance.md,
"Engine utilization").

Token counts, read from the reply as each engine states them:
- an OpenAI-style `usage` (vLLM, SGLang, llama.cpp's /v1 routes): prompt_tokens / completion_tokens;
- llama.cpp's native /completion: tokens_evaluated / tokens_predicted;
- SGLang's native /generate: meta_info.prompt_tokens / completion_tokens;
- otherwise the length of a prompt sent as token ids, and no completion count (null).
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

RECORD_VERSION = 1


def reply_tokens(body: dict, reply) -> tuple[int | None, int | None]:
    """(prompt tokens, completion tokens) of one request, as the reply states them (module docstring)."""
    def count(value):
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

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


class RequestRecorder:
    """Appends one line per request to `path` (thread-safe; lines whole, flushed as written)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.count = 0

    def record(self, *, path: str, body: dict, reply, server: str, start: float, end: float) -> None:
        prompt, completion = reply_tokens(body, reply)
        line = json.dumps({"v": RECORD_VERSION, "server": server, "path": path, "start": round(start, 6),
                           "end": round(end, 6), "prompt_tokens": prompt, "completion_tokens": completion,
                           "body": body}, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_records(path: Path) -> list[dict]:
    """requests.jsonl's records; a line that is not a record is a one-line ValueError naming file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("body"), dict) or not isinstance(rec.get("path"), str) \
                    or not all(isinstance(rec.get(k), (int, float)) for k in ("start", "end")):
                raise ValueError(f"{path}:{n}: a request record needs path, body, start and end")
            out.append(rec)
    return out
