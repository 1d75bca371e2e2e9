"""A server is input (issue 42): a bounded local server on 127.0.0.1 that drips, stalls, floods
and lies. Every request ends within its total deadline, a flood is refused before it is parsed,
Retry-After is capped, lies about usage are one-line errors, and the server's control bytes never
reach the terminal."""
from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from scgmem.llm.served.http_client import JsonClient, ServerError


class Hostile(http.server.BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.handle_mode()

    def do_GET(self):
        self.handle_mode()

    def handle_mode(self):
        mode = type(self).mode
        if mode == "drip":  # one byte at a time, forever (bounded here at 20 s)
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(40):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.5)
        elif mode == "stall":
            time.sleep(10)
        elif mode == "flood":
            self._send(200, b'{"x": "' + b"a" * (3 << 20) + b'"}')
        elif mode == "retry_after":
            self._send(503, b"busy", {"Retry-After": "100000"})
        elif mode == "control":
            self._send(400, b"\x1b[2J\x1b[31mgotcha\x07")
        elif mode.startswith("usage:"):
            usage = json.loads(mode[6:])
            self._send(200, json.dumps({"choices": [{"text": "hi", "finish_reason": "stop"}], "usage": usage,
                                        "data": [{"id": "m"}]}).encode())
        else:
            self._send(200, b'{"data": [{"id": "m"}]}')


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    Hostile.mode = "ok"


@pytest.mark.parametrize("mode", ["drip", "stall"])
def test_every_request_has_a_total_deadline(server, mode):
    Hostile.mode = mode
    client = JsonClient(server, timeout_s=1.5, retries=0)
    start = time.monotonic()
    with pytest.raises(ServerError, match="unreachable after 1 tries"):
        client.post("/v1/completions", {})
    assert time.monotonic() - start < 4


def test_a_flood_is_refused_before_it_is_parsed(server):
    Hostile.mode = "flood"
    with pytest.raises(ServerError, match="larger than 1048576 bytes"):
        JsonClient(server, retries=0, max_body_bytes=1 << 20).post("/x", {})


def test_retry_after_is_capped(server, monkeypatch):
    Hostile.mode = "retry_after"
    waits = []
    monkeypatch.setattr("scgmem.llm.served.http_client.time.sleep", waits.append)
    with pytest.raises(ServerError, match="HTTP 503"):
        JsonClient(server, retries=2, backoff_s=0.01, max_retry_after_s=5).post("/x", {})
    assert waits and max(waits) <= 5


def test_control_bytes_never_reach_the_terminal(server):
    Hostile.mode = "control"
    with pytest.raises(ServerError) as error:
        JsonClient(server, retries=0).post("/x", {})
    message = str(error.value)
    assert "gotcha" in message and not any(ord(c) < 32 for c in message), repr(message)


@pytest.mark.parametrize("usage", [{"prompt_tokens": -5}, {"prompt_tokens": 10 ** 12}, {"completion_tokens": "7"},
                                   {"prompt_tokens": True}])
def test_lies_about_usage_are_one_line_errors(server, usage):
    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM

    Hostile.mode = "usage:" + json.dumps(usage)
    llm = object.__new__(OpenAICompatibleLLM)
    llm.base_url, llm.api, llm.context_window, llm.prefill = server + "/v1", "completions", 4096, False
    from scgmem.llm.usage import UsageMeter

    llm.usage, llm.served_models = UsageMeter(), set()
    reply = JsonClient(server + "/v1", retries=0).post("/completions", {})
    with pytest.raises(ServerError, match="usage"):
        llm._generation(reply, "", ())
