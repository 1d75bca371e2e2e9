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
import json
import logging
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


def printable(raw: bytes | str, limit: int = 200) -> str:
    """A server's text as one safe line: decoded, control characters replaced, cut to `limit`."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return _CONTROL.sub(" ", text[:limit]).strip()


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

    def _once(self, url: str, data: bytes | None) -> bytes:
        """One request under one total deadline; the body, or _Status for an error status."""
        parts = urllib.parse.urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        kwargs = {"context": ssl.create_default_context()} if parts.scheme == "https" else {}
        conn = cls(parts.hostname, parts.port, timeout=self.timeout_s, **kwargs)
        expired = threading.Event()

        held: list[socket.socket] = []  # the socket (a response to an HTTP/1.0 server takes it from conn)

        def cut() -> None:  # the deadline: whatever read is blocked fails now
            expired.set()
            for sock in held:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        watchdog = threading.Timer(self.timeout_s, cut)
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
                raise TimeoutError(f"no complete reply within {self.timeout_s:.0f} s")
            raw = b"".join(chunks)
            if response.status >= 400:
                raise _Status(response.status, raw[:200], response.getheader("Retry-After"))
            return raw
        except (OSError, http.client.HTTPException):
            if expired.is_set():
                raise TimeoutError(f"no complete reply within {self.timeout_s:.0f} s") from None
            raise
        finally:
            watchdog.cancel()
            conn.close()

    def _request(self, url: str, body: dict | None, retry: bool = True) -> dict:
        data = None if body is None else json.dumps(body).encode()
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(attempts):
            wait = self.backoff_s * 2 ** attempt
            try:
                raw = self._once(url, data)
                break
            except _Status as e:
                if e.code not in RETRY_STATUS or attempt == attempts - 1:
                    raise ServerError(f"{url}: HTTP {e.code} {printable(e.detail)}".strip()) from None
                after = (e.retry_after or "").strip()
                if after.replace(".", "", 1).isdigit():
                    wait = max(wait, min(float(after), self.max_retry_after_s))
                reason = f"HTTP {e.code}"
            except (OSError, http.client.HTTPException, TimeoutError) as e:
                reason = printable(str(getattr(e, "reason", e)) or type(e).__name__)
                if attempt == attempts - 1:
                    raise ServerError(f"{url}: unreachable after {attempts} tries ({reason})") from None
            log.warning("%s: %s; retry %d/%d in %.1f s", url, reason, attempt + 1, attempts - 1, wait)
            time.sleep(wait)
        try:
            reply = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise ServerError(f"{url}: reply is not JSON: {printable(raw, 80)!r}") from None
        if not isinstance(reply, dict):
            raise ServerError(f"{url}: reply is not a JSON object: {printable(raw, 80)!r}")
        return reply
