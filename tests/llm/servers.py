"""Servers for the served-backend tests: a tiny scripted OpenAI-compatible one (http.server, in a
thread; it can refuse, fail, send malformed JSON or answer slowly) and the real one
(`transformers serve` on the embedded SmolLM2's HF folder, in a subprocess)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scgmem.llm.served.launchers.launch import EngineStartError, free_port, stop_process, wait_healthy  # noqa: F401 (re-exported)


class ScriptedServer:
    """`reply(body) -> (status, payload)` answers each POST /v1/chat/completions; payload is a
    dict (sent as JSON) or bytes (sent as is). GET /v1/models lists `model`."""

    def __init__(self, reply, model: str = "tiny-served") -> None:
        self.reply, self.model, self.bodies, self.lock = reply, model, [], threading.Lock()
        self.gets: list[str] = []  # the path of every GET, in order
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def _send(self, status, payload):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                with outer.lock:
                    outer.gets.append(self.path)
                self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.bodies.append({**body, "_path": self.path, "_auth": self.headers.get("Authorization")})
                if not self.path.endswith("completions"):  # /chat/completions and /completions
                    return self._send(404, {"error": "not found"})
                self._send(*outer.reply(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(text: str, model: str = "tiny-served", finish: str = "stop", prompt_tokens: int = 7) -> dict:
    return {"object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                      "total_tokens": prompt_tokens + len(text.split())}}


def serve_command() -> list[str]:
    exe = Path(sys.executable).with_name("transformers")
    return [str(exe)] if exe.exists() else [shutil.which("transformers") or "transformers"]


class RealServer:
    """`transformers serve` on 127.0.0.1 with the given model folder; waits for /health (bounded,
    `launch.wait_healthy`, as the engines' launchers), stops with SIGTERM then SIGKILL."""

    def __init__(self, model_dir: Path, log_path: Path, start_timeout_s: float = 240) -> None:
        self.model_dir, self.log_path, self.start_timeout_s = model_dir, log_path, start_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self):
        cmd = [*serve_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
               "--dtype", "float32", "--log-level", "warning", str(self.model_dir)]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
        try:
            wait_healthy(self.proc, f"http://127.0.0.1:{self.port}/health", wait_s=self.start_timeout_s,
                         what="transformers serve", log=self.log_path)
        except EngineStartError:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        stop_process(self.proc)
        self.log.close()
