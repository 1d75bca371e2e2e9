"""Issue 48: `model.base_url` forms, secrets, /v1/models, server pools, Retry-After and /tokenize.

Every server here listens on 127.0.0.1 in ports 18300-18399 (this issue's range) and answers a
bounded script; no case waits past its client's deadline.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scgmem.llm.served.http_client import (PLAIN_HTTP_KEY_ENV, JsonClient, ServerError, check_key_transport,
                                           parse_base_url, tokenize_reply)
from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM

PORTS = range(18300, 18400)


class Server:
    """GET /v1/models lists `models`; POST <path> answers `routes[path](body) -> (status, payload, headers)`."""

    def __init__(self, models=("m",), routes=None) -> None:
        self.models, self.routes, self.seen = list(models), dict(routes or {}), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, payload, headers=None):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                outer.seen.append(("GET", self.path, None))
                self._send(200, {"data": [{"id": m} for m in outer.models]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append(("POST", self.path, body))
                route = outer.routes.get(self.path)
                self._send(*(route(body) if route else (404, {"error": "no"})))

        for port in PORTS:
            try:
                self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
                break
            except OSError:
                continue
        else:
            pytest.skip("no free port in 18300-18399")
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _llamacpp_tokenize(body):
    """llama.cpp's /tokenize: it reads `content` and answers an empty list without it."""
    text = body.get("content", "")
    return 200, {"tokens": [100 + i for i, _ in enumerate(text.split())]}, {}


@pytest.mark.parametrize("url, says", [
    ("file:///etc/passwd", "scheme must be http"), ("127.0.0.1:1/v1", "scheme must be http"),
    ("javascript:alert(1)", "scheme must be http"), ("unix:///tmp/s.sock", "scheme must be http"),
    ("http:///v1", "no host"), ("htps://127.0.0.1/v1", "scheme must be http"),
    ("http://127.0.0.1:99999/v1", "not a URL"), ("http://127.0.0.1/v1\r\nX-Injected: 1", "control character"),
    ("http://" + "a" * 100_000 + "/v1", "longer than 2048"),
    ("http://user:hunter2@127.0.0.1/v1", "credentials in the URL are refused"),
])
def test_bad_base_urls_are_one_short_line(url, says):
    with pytest.raises(ValueError) as e:
        OpenAICompatibleLLM(url, "m", retries=0)
    text = str(e.value)
    assert says in text and "\n" not in text and "\r" not in text and len(text) < 400
    assert "hunter2" not in text


def test_a_list_of_urls_names_the_bad_one():
    with pytest.raises(ValueError, match=r"model.base_url\[1\]=ftp://x: the scheme"):
        OpenAICompatibleLLM(["http://127.0.0.1:18399/v1", "ftp://x"], "m", retries=0)


def test_a_key_never_goes_over_plain_http_to_another_host(monkeypatch):
    monkeypatch.setenv("SCGMEM_TEST_KEY", "sk-secret")
    monkeypatch.delenv(PLAIN_HTTP_KEY_ENV, raising=False)
    with pytest.raises(ValueError, match="unencrypted to another host") as e:
        OpenAICompatibleLLM("http://192.0.2.1/v1", "m", api_key_env="SCGMEM_TEST_KEY", retries=0)
    assert "sk-secret" not in str(e.value)
    check_key_transport(["https://192.0.2.1/v1", "http://127.0.0.1:1/v1", "http://localhost/v1"], has_key=True)
    check_key_transport(["http://192.0.2.1/v1"], has_key=False)  # no key: nothing to leak
    monkeypatch.setenv(PLAIN_HTTP_KEY_ENV, "1")  # the user's explicit yes
    check_key_transport(["http://192.0.2.1/v1"], has_key=True)


def test_parse_keeps_a_good_url():
    assert parse_base_url("https://example.org:8443/v1/") == "https://example.org:8443/v1"


def test_a_models_flood_is_a_short_line():
    with Server(models=[f"model-{i}-" + "x" * 200 for i in range(20_000)]) as server:
        with pytest.raises(ValueError) as e:
            OpenAICompatibleLLM(server.url, "m", retries=0).ready()
    text = str(e.value)
    assert "not served at" in text and "(20000 in all)" in text and len(text) < 600


def test_every_server_of_a_pool_must_serve_the_model():
    tokenize = {"/tokenize": _llamacpp_tokenize}
    with Server(models=["m"], routes=tokenize) as a, Server(models=["other"], routes=tokenize) as b:
        with pytest.raises(ValueError, match=f"model.model_id=m: not served at {b.url}"):
            OpenAICompatibleLLM([a.url, b.url], "m", retries=0).ready()


def test_retry_after_counts_against_the_request_deadline():
    with Server(routes={"/v1/x": lambda b: (503, b"busy", {"Retry-After": "30"})}) as server:
        client = JsonClient(server.url, timeout_s=2, retries=5, backoff_s=0.01, max_retry_after_s=60)
        with pytest.raises(ServerError, match="would pass the request's deadline, model.timeout_s=2"):
            client.post("/x", {})
    assert sum(1 for method, path, _ in server.seen if path == "/v1/x") == 1  # no 30 s sleep, no retry


def test_llamacpp_tokenize_posts_content_and_counts_tokens():
    """llama.cpp answers `prompt` with [] (every context counted 0 tokens before issue 48)."""
    with Server(routes={"/tokenize": _llamacpp_tokenize}) as server:
        llm = OpenAICompatibleLLM(server.url, "m", retries=0)
        assert llm.count_tokens("one two three") == 3
    bodies = [body for method, path, body in server.seen if path == "/tokenize"]
    assert "content" in bodies[-1] and bodies[-1]["content"] == "one two three"


@pytest.mark.parametrize("tokens", [["x"], [True], [-1], list(range(100)), {"a": 1}, [], [1.5]])
def test_a_lying_tokenize_reply_is_one_line(tokens):
    with pytest.raises(ServerError) as e:
        tokenize_reply({"tokens": tokens}, "two words", "http://127.0.0.1:18300/tokenize")
    assert "field 'tokens'" in str(e.value) and "\n" not in str(e.value)


def test_a_server_without_a_working_tokenize_is_refused():
    with Server(routes={"/tokenize": lambda b: (200, {"tokens": []}, {})}) as server:
        with pytest.raises(ValueError, match="model.tokenizer is required"):
            OpenAICompatibleLLM(server.url, "m", retries=0).ready()


def _free_port_in_range() -> int:
    import socket

    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 18300-18399")


@pytest.mark.slow
def test_token_counts_of_a_real_llamacpp_server_match_the_tokenizer():
    """Without model.tokenizer, counts come from llama.cpp's /tokenize: they must equal the model's own
    tokenizer's (before issue 48 every count was 0)."""
    pytest.importorskip("xllamacpp")
    from transformers import AutoTokenizer

    from scgmem.llm.loading import EMBEDDED, resolve_model_dir
    from scgmem.llm.served.launchers.llamacpp import bundled_gguf, start

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(None, **EMBEDDED))
    port = _free_port_in_range()
    proc = start(port, slots=1, threads=1, n_ctx=2048, wait_s=120)
    try:
        llm = OpenAICompatibleLLM(f"http://127.0.0.1:{port}/v1", str(bundled_gguf()), retries=0)
        texts = ["Caroline: I went to the LGBTQ support group yesterday.", "7 May 2023", "a  b\n\nc", "é ü 😀"]
        for text in texts:
            assert llm.count_tokens(text) == len(tokenizer(text, add_special_tokens=False)["input_ids"]) > 0, text
        assert llm.decode(llm.encode(texts[0])).strip() == texts[0]
    finally:
        proc.kill()
        proc.wait(timeout=10)
