"""A small JSON-over-HTTP client for the served backend (`scgmem.llm.openai_compatible`): timeouts,
retries with exponential back-off on 429, 5xx and dropped connections, and a one-line
`ServerError` naming the URL when the server stays unreachable or answers something that is not
JSON. Standard library only (urllib), so the backend needs no extra dependency.
"""
from __future__ import annotations

import http.client
import json
import logging
import socket
import time
import urllib.error
import urllib.request

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class ServerError(RuntimeError):
    """The server cannot be used (unreachable after retries, an error status, or not JSON);
    str(e) is one line naming the URL. The run stops with exit code 2 and keeps its predictions."""


class JsonClient:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 300.0, retries: int = 5,
                 backoff_s: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)

    def get(self, path: str) -> dict:
        return self._request(self.base_url + path, None)

    def post(self, path: str, body: dict) -> dict:
        return self._request(self.base_url + path, body)

    def post_url(self, url: str, body: dict, retry: bool = True) -> dict:
        return self._request(url, body, retry=retry)

    def _request(self, url: str, body: dict | None, retry: bool = True) -> dict:
        data = None if body is None else json.dumps(body).encode()
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(attempts):
            request = urllib.request.Request(url, data=data, headers=self.headers, method="GET" if data is None else "POST")
            wait = self.backoff_s * 2 ** attempt
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    raw = response.read()
                break
            except urllib.error.HTTPError as e:
                detail = e.read()[:200].decode("utf-8", "replace").replace("\n", " ")
                if e.code not in RETRY_STATUS or attempt == attempts - 1:
                    raise ServerError(f"{url}: HTTP {e.code} {detail}".strip()) from None
                after = e.headers.get("Retry-After") if e.headers else None
                if after and after.replace(".", "", 1).isdigit():
                    wait = max(wait, float(after))
                reason = f"HTTP {e.code}"
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError) as e:
                reason = str(getattr(e, "reason", e)) or type(e).__name__
                if attempt == attempts - 1:
                    raise ServerError(f"{url}: unreachable after {attempts} tries ({reason})") from None
            log.warning("%s: %s; retry %d/%d in %.1f s", url, reason, attempt + 1, attempts - 1, wait)
            time.sleep(wait)
        try:
            reply = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ServerError(f"{url}: reply is not JSON: {raw[:80]!r}") from None
        if not isinstance(reply, dict):
            raise ServerError(f"{url}: reply is not a JSON object: {raw[:80]!r}")
        return reply
