"""A content-replay engine: an OpenAI-compatible server on 127.0.0.1 that answers with a run's recorded replies.

    python -m scripts.replay_server <run_dir> [<run_dir> ...] --port 18210 [--latency none|<model>]

A measuring tool (issue 57, item 3), never a user's engine: it reads requests.jsonl (version 2 records
carry each request's reply: scgmem/llm/served/recorder.py; checked by request_profile.read_records) and
answers a POST whose body equals a recorded one (cache_salt aside) with that request's reply, the
recorded replies of identical bodies in turn. Run the harness against it with the same settings as
the recorded run and it gets the same replies, so the harness runs at whatever speed the engine is made
to have: `--latency none` answers at once (the fastest rate the harness can drive an engine), `--latency
qwen2.5-1.5b` (any model of scripts/gpu_estimate.CONSTANTS) waits what that model's prefill and decode at
batch 1 on the high end of the cost model would take. A body that was never recorded gets HTTP 404
naming the miss (counted in GET /replay/stats); GET /v1/models lists the recorded model names.
Requests the run sends before it records (the engine probe of `model.engine`) are not in the run's file:
record them once against the real server and pass that folder too (scripts/bench_drive_rate.py `--probe`).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scgmem.harness.safe_files import open_nofollow
from scgmem.llm.served.request_profile import BadRecord, read_records

MAX_BODY = 64 << 20


def key(body: dict) -> str:
    return json.dumps({k: v for k, v in body.items() if k != "cache_salt"}, sort_keys=True, separators=(",", ":"))


class Replies:
    """The recorded replies by body, handed out in recorded order; latency by the cost model."""

    def __init__(self, records: list[dict], latency=None) -> None:
        self.by_body: dict[str, deque] = defaultdict(deque)
        self.all: dict[str, list] = defaultdict(list)
        for r in records:
            if "reply" in r:
                self.by_body[key(r["body"])].append(r)
                self.all[key(r["body"])].append(r)
        self.models = sorted({r["body"].get("model") for r in records if isinstance(r["body"].get("model"), str)})
        self.latency, self.lock = latency, threading.Lock()
        self.stats = {"answered": 0, "missed": 0, "reused": 0}

    def answer(self, body: dict):
        k = key(body)
        with self.lock:
            queue = self.by_body.get(k)
            if queue:
                rec = queue.popleft()
            elif k in self.all:  # more identical bodies than recorded (a rerun): the last reply again
                rec = self.all[k][-1]
                self.stats["reused"] += 1
            else:
                self.stats["missed"] += 1
                return None
            self.stats["answered"] += 1
        if self.latency is not None:
            time.sleep(self.latency(rec))
        return rec["reply"]


def cost_latency(model: str):
    from scripts.gpu_estimate import CONSTANTS

    if model not in CONSTANTS["decode_s_batch1"]:
        raise SystemExit(f"error: --latency {model}: choose none or one of {', '.join(CONSTANTS['decode_s_batch1'])}")
    step, prefill = CONSTANTS["decode_s_batch1"][model][1], CONSTANTS["prefill_tokens_per_s"][model]
    return lambda rec: (rec.get("prompt_tokens") or 0) / prefill + (rec.get("completion_tokens") or 0) * step


def serve(replies: Replies, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, payload) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                return self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in replies.models]})
            if self.path in ("/health", "/replay/stats"):
                return self._send(200, replies.stats)
            self._send(404, {"error": "not found"})

        def do_POST(self):
            size = int(self.headers.get("Content-Length") or 0)
            if not 0 < size <= MAX_BODY:
                return self._send(413, {"error": "body size"})
            try:
                body = json.loads(self.rfile.read(size))
            except ValueError:
                return self._send(400, {"error": "not JSON"})
            reply = replies.answer(body) if isinstance(body, dict) else None
            if reply is None:
                return self._send(404, {"error": "replay server: this body is not in the recording"})
            self._send(200, reply)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--port", type=int, default=18210)
    ap.add_argument("--latency", default="none", help="none, or a model of scripts/gpu_estimate.CONSTANTS")
    args = ap.parse_args()
    records = []
    for d in args.run_dirs:
        try:
            records += read_records(d / "requests.jsonl", lambda p: open_nofollow(p, "rb"))
        except (BadRecord, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    replies = Replies(records, None if args.latency == "none" else cost_latency(args.latency))
    server = serve(replies, args.port)
    print(f"replaying {sum(len(v) for v in replies.all.values())} replies on http://127.0.0.1:{args.port}/v1",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
