"""A small JSON-over-HTTP client for the served backend (`scgmem.llm.served.openai_compatible`): bounded
waits, retries with exponential back-off on 429, 5xx and dropped connections, and a one-line
`ServerError` naming the URL when the server stays unreachable or answers something that is not
JSON. Standard library only (http.client), so the backend needs no extra dependency.

A server's reply is input like any file (docs/validation.md, "Server replies"):
- every request has a *total* deadline (`timeout_s`): a watchdog shuts the socket when it passes, so
  a server that drips a byte at a time or stalls inside its headers cannot hold a run;
- the body is read in chunks up to `max_body_bytes`, then refused (a 50 MB answer is not parsed);
- `Retry-After` is obeyed up to `max_retry_after_s`;
- anything of the server's printed in an error is cut and stripped of control characters.
"""
from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_BODY_BYTES = 32 << 20
MAX_RETRY_AFTER_S = 60.0
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class ServerError(RuntimeError):
    """The server cannot be used (unreachable after retries, an error status, or not JSON);
    str(e) is one line naming the URL. The run stops with exit code 2 and keeps its predictions."""


class ServerDown(ServerError):
    """The server failed, not the request: unreachable after every retry, or an HTTP 5xx status that
    the retries did not clear. A pool (`transport.ServerPool`) sends its requests to the other servers."""


class BadServerReply(ServerError):
    """A reply the client cannot use (a field of the wrong shape, a token outside the grammar the
    request carried, an empty continuation, a top list with a repeated or unranked id): one line
    naming the server, the field and the value, shown short and without control characters."""


def printable(raw: bytes | str, limit: int = 200) -> str:
    """A server's text as one safe line: decoded, control characters replaced, cut to `limit`."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return _CONTROL.sub(" ", text[:limit]).strip()


# -- model.base_url: parsed once, before any request -----------------------------------------------

MAX_URL_CHARS = 2048
# The explicit "yes" to sending model.api_key_env's key over plain HTTP to a host that is not this
# machine (anyone on the path reads it): off unless the user sets it.
PLAIN_HTTP_KEY_ENV = "SCGMEM_ALLOW_PLAIN_HTTP_KEY"


def _shown_url(value) -> str:
    """A URL as a message shows it: cut, control characters escaped, any password hidden."""
    text = str(value)
    text = re.sub(r"//[^/@]*@", "//<credentials>@", text)
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}"
                   for ch in text[:120])
    return text + ("..." if len(str(value)) > 120 else "")


def parse_base_url(value, field: str = "model.base_url") -> str:
    """`value` as an OpenAI root the client may use: http or https with a host, no credentials, no
    control characters, at most MAX_URL_CHARS; the trailing slash dropped. Anything else is a
    ValueError whose one line names `field` and shows the value (cut, escaped, password hidden).

    Credentials in the URL (`http://user:pass@host/v1`) are refused rather than moved to a header:
    the URL is a setting, and settings are written into .hydra/, summary.json and wandb; the key
    belongs in an environment variable named by model.api_key_env, which is written nowhere."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{field}={_shown_url(value)}: {why}")

    if not isinstance(value, str) or not value:
        raise bad("must be a URL such as http://127.0.0.1:8000/v1")
    if len(value) > MAX_URL_CHARS:
        raise bad(f"longer than {MAX_URL_CHARS} characters")
    if any(not ch.isprintable() or ch.isspace() for ch in value):
        raise bad("holds a control character or space")
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port  # ValueError for a port that is not a number in range
    except ValueError as e:
        raise bad(f"not a URL ({e})") from None
    if parts.scheme not in ("http", "https"):
        raise bad("the scheme must be http:// or https:// (e.g. http://127.0.0.1:8000/v1)")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise bad("credentials in the URL are refused (they would be written into the run's files): put the key "
                  "in an environment variable and name it with model.api_key_env")
    if not parts.hostname:
        raise bad("no host (e.g. http://127.0.0.1:8000/v1)")
    if parts.fragment:
        raise bad("a URL fragment (#...) is not part of a server's address")
    del port
    return value.rstrip("/")


def parse_base_urls(value, field: str = "model.base_url") -> list[str]:
    """One URL or a list of them (several servers of one model), each through `parse_base_url`."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{field}: an empty list; give at least one server")
        return [parse_base_url(v, f"{field}[{i}]") for i, v in enumerate(value)]
    return [parse_base_url(value, field)]


def is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_key_transport(urls: list[str], has_key: bool) -> None:
    """Refuse to send an API key over plain HTTP to a host that is not this machine, unless the user
    said so (PLAIN_HTTP_KEY_ENV=1): a typo such as `htps://` is refused by `parse_base_url`, and
    a plain http:// to a remote host is refused here."""
    if not has_key or os.environ.get(PLAIN_HTTP_KEY_ENV) == "1":
        return
    for url in urls:
        if urllib.parse.urlsplit(url).scheme == "http" and not is_loopback(url):
            raise ValueError(f"model.base_url={_shown_url(url)}: the API key (model.api_key_env) would travel "
                             f"unencrypted to another host; use https://, or set {PLAIN_HTTP_KEY_ENV}=1 to send "
                             "it anyway")


MAX_MODELS_SHOWN = 5


def listed_models(client: "JsonClient") -> list[str]:
    """The model ids GET /models lists (a ServerError naming the server when it answers no list);
    what the backend's readiness, the served sweep's BASE_URLS and `make vllm`'s "already up" ask."""
    data = client.get("/models").get("data", [])
    if not isinstance(data, list):
        raise ServerError(f"{client.base_url}/models: field 'data': {printable(repr(data), 60)}: must be a list")
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def served_models(client: "JsonClient", model_id: str) -> list[str]:
    """The model ids GET /models lists; a ValueError naming the server when `model_id` is not among
    them (a server that lists none is taken at its word). The message shows a few names, each cut:
    a reply listing 100,000 models is not a 10 MB error line."""
    listed = listed_models(client)
    if listed and model_id not in listed:
        shown = ", ".join(repr(printable(m, 60)) for m in listed[:MAX_MODELS_SHOWN])
        more = f", ... ({len(listed)} in all)" if len(listed) > MAX_MODELS_SHOWN else ""
        raise ValueError(f"model.model_id={printable(model_id, 120)}: not served at {client.base_url} "
                         f"(it serves {shown}{more})")
    return listed


# The text field of each server's /tokenize: vLLM and SGLang read `prompt`, llama.cpp `content`
# (it answers `prompt` with an empty list, which counted every context as 0 tokens).
TOKENIZE_FIELDS = ("prompt", "content")


def find_tokenize_endpoint(client: "JsonClient", base_url: str, model_id: str) -> tuple[str, str]:
    """(URL, text field) of the /tokenize that tokenizes a probe into a non-empty list; refuse rather
    than guess a count."""
    root = re.sub(r"/v1$", "", base_url)
    for url in (root + "/tokenize", base_url + "/tokenize"):
        for name in TOKENIZE_FIELDS:
            try:
                reply = client.post_url(url, {"model": model_id, name: "probe", "add_special_tokens": False},
                                        retry=False)
            except ServerError:
                break
            if isinstance(reply.get("tokens"), list) and reply["tokens"]:
                return url, name
    raise ValueError(f"model.tokenizer is required: {base_url} has no /tokenize endpoint, and token "
                     f"budgets need the served model's tokenizer (a local folder or hub id)")


def tokenize_reply(reply: dict, text: str, url: str) -> list[int]:
    """The token ids of a /tokenize reply for `text`: a list of non-negative ints, non-empty for a
    non-empty text, at most one per byte of the text (+8: more is no tokenizer's answer); anything else is a one-line ServerError."""
    tokens = reply.get("tokens")
    limit = len(text.encode("utf-8")) + 8
    if not isinstance(tokens, list) or len(tokens) > limit or (text and not tokens) \
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 1 << 31 for t in tokens):
        raise ServerError(f"{url}: field 'tokens': {printable(repr(tokens), 60)}: must be a list of 1-{limit} "
                          f"token ids for a text of {len(text)} characters")
    return tokens


class _Status(Exception):
    def __init__(self, code: int, detail: bytes, retry_after: str | None) -> None:
        self.code, self.detail, self.retry_after = code, detail, retry_after


class JsonClient:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 300.0, retries: int = 5,
                 backoff_s: float = 1.0, max_body_bytes: int = MAX_BODY_BYTES,
                 max_retry_after_s: float = MAX_RETRY_AFTER_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.max_body_bytes, self.max_retry_after_s = int(max_body_bytes), float(max_retry_after_s)

    def get(self, path: str) -> dict:
        return self._request(self.base_url + path, None)

    def post(self, path: str, body: dict) -> dict:
        return self._request(self.base_url + path, body)

    def post_url(self, url: str, body: dict, retry: bool = True) -> dict:
        return self._request(url, body, retry=retry)

    def _once(self, url: str, data: bytes | None, limit_s: float) -> bytes:
        """One attempt, cut after `limit_s` (what is left of the request's deadline); the body, or
        _Status for an error status."""
        parts = urllib.parse.urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        kwargs = {"context": ssl.create_default_context()} if parts.scheme == "https" else {}
        conn = cls(parts.hostname, parts.port, timeout=limit_s, **kwargs)
        expired = threading.Event()

        held: list[socket.socket] = []  # the socket (a response to an HTTP/1.0 server takes it from conn)

        def cut() -> None:  # the deadline: whatever read is blocked fails now
            expired.set()
            for sock in held:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        watchdog = threading.Timer(limit_s, cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.connect()
            held.append(conn.sock)
            if expired.is_set():
                cut()
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request("GET" if data is None else "POST", path or "/", body=data, headers=self.headers)
            response = conn.getresponse()
            chunks, size = [], 0
            while True:
                chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
                if not chunk or expired.is_set():
                    break
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise ServerError(f"{url}: reply larger than {self.max_body_bytes} bytes (refused)")
                chunks.append(chunk)
            if expired.is_set():  # the watchdog shut the socket: what came is a cut reply
                raise TimeoutError(f"no complete reply within {limit_s:.0f} s")
            raw = b"".join(chunks)
            if response.status >= 400:
                raise _Status(response.status, raw[:200], response.getheader("Retry-After"))
            return raw
        except (OSError, http.client.HTTPException):
            if expired.is_set():
                raise TimeoutError(f"no complete reply within {limit_s:.0f} s") from None
            raise
        finally:
            watchdog.cancel()
            conn.close()

    def _request(self, url: str, body: dict | None, retry: bool = True) -> dict:
        """The reply of `url`, within one total deadline (`timeout_s`) for every attempt and every
        wait between them: a Retry-After or back-off that would pass it ends the request now."""
        data = None if body is None else json.dumps(body).encode()
        attempts = 1 + (self.retries if retry else 0)
        deadline = time.monotonic() + self.timeout_s
        for attempt in range(attempts):
            wait = self.backoff_s * 2 ** attempt
            try:
                raw = self._once(url, data, max(deadline - time.monotonic(), 0.001))
                break
            except _Status as e:
                if e.code not in RETRY_STATUS or attempt == attempts - 1:
                    failed = ServerDown if e.code >= 500 else ServerError
                    raise failed(f"{url}: HTTP {e.code} {printable(e.detail)}".strip()) from None
                after = (e.retry_after or "").strip()
                if after.replace(".", "", 1).isdigit():
                    wait = max(wait, min(float(after), self.max_retry_after_s))
                reason = f"HTTP {e.code}"
            except (OSError, http.client.HTTPException, TimeoutError) as e:
                reason = printable(str(getattr(e, "reason", e)) or type(e).__name__)
                if attempt == attempts - 1:
                    raise ServerDown(f"{url}: unreachable after {attempts} tries ({reason})") from None
            if time.monotonic() + wait >= deadline:
                raise ServerDown(f"{url}: unreachable after {attempt + 1} tries ({reason}; a wait of {wait:.1f} s "
                                  f"would pass the request's deadline, model.timeout_s={self.timeout_s:g})")
            log.warning("%s: %s; retry %d/%d in %.1f s", url, reason, attempt + 1, attempts - 1, wait)
            time.sleep(wait)
        try:
            reply = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise ServerError(f"{url}: reply is not JSON: {printable(raw, 80)!r}") from None
        if not isinstance(reply, dict):
            raise ServerError(f"{url}: reply is not a JSON object: {printable(raw, 80)!r}")
        return reply
