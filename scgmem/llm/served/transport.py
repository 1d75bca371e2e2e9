"""The engine questions of `dialect`, asked over HTTP of one or several servers of one model.

`ServerPool` spreads requests over the servers listed in `model.base_url` (one vLLM per GPU, say):
each request goes to the server its affinity key picks, so the requests of one prompt (a greedy
list's keys, a beam's expansions) stay on one server and reuse its prefix cache; a server that
stays unreachable or keeps answering HTTP 5xx is marked dead and its requests go to the others.
Every POST holds a slot of the pool's one `InFlightLimiter` (`model.max_in_flight`, fair across the
servers) and, when a `RequestRecorder` is set, leaves one line in requests.jsonl. `HttpTransport` is a
`keys.Transport` over a pool and an `EngineDialect`.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Sequence

from scgmem.llm import causal
from scgmem.llm.served.http_client import BadServerReply, JsonClient, ServerDown, ServerError, printable
from scgmem.llm.served.engines.dialect import BadReply, Continuation, EngineDialect, NextTokens, Unsupported
from scgmem.llm.served.limiter import InFlightLimiter

log = logging.getLogger(__name__)


def server_root(base_url: str) -> str:
    """The server's root (native endpoints such as llama.cpp's /completion and SGLang's /generate
    sit beside the OpenAI root /v1)."""
    return re.sub(r"/v1/?$", "", base_url.rstrip("/"))


class ServerPool:
    """Args:
        base_urls: the OpenAI roots of servers of the same model.
        max_in_flight: requests in flight at once over all the servers (`model.max_in_flight`).
        client_args: JsonClient keywords (api_key, timeout_s, retries, backoff_s).

    `recorder`: a `RequestRecorder`, or None (nothing recorded).
    """

    def __init__(self, base_urls: Sequence[str], *, max_in_flight: int = 16, **client_args) -> None:
        if not base_urls:
            raise ValueError("model.base_url: no server given")
        self.urls = [u.rstrip("/") for u in base_urls]
        self.clients = [JsonClient(server_root(u), **client_args) for u in self.urls]
        self.dead: set[int] = set()
        self.sent = [0] * len(self.urls)
        self.limiter = InFlightLimiter(max_in_flight, servers=len(self.urls))
        self.recorder = None
        self._lock = threading.Lock()

    def post(self, path: str, body: dict, affinity: int = 0) -> dict:
        """POST to the server `affinity` picks among the live ones (`post_from`); the reply."""
        return self.post_from(path, body, affinity)[0]

    def post_from(self, path: str, body: dict, affinity: int = 0) -> tuple[dict, str]:
        """(the reply, the URL of the server that sent it). A server that fails (`ServerDown`:
        unreachable, or HTTP 5xx after its retries) is marked dead and the request goes to another;
        the last live server's failure is raised, naming that server."""
        while True:
            with self._lock:
                live = [i for i in range(len(self.clients)) if i not in self.dead]
                if not live:
                    raise ServerError(f"{', '.join(self.urls)}: every server is unreachable")
                i = live[affinity % len(live)]
                self.sent[i] += 1
            try:
                with self.limiter.slot(i):
                    start = time.time()
                    reply = self.clients[i].post(path, body)
                    end = time.time()
                if self.recorder is not None:
                    self.recorder.record(path=path, body=body, reply=reply, server=self.urls[i], start=start, end=end)
                return reply, self.urls[i]
            except ServerDown as e:
                with self._lock:  # another request may have found server i dead meanwhile: count the others
                    if not [j for j in range(len(self.clients)) if j not in self.dead and j != i]:
                        raise
                    self.dead.add(i)
                log.warning("%s failed (%s): its requests go to the other server(s)", self.urls[i], printable(e))

    def report(self) -> dict:
        return {"servers": self.urls, "requests": list(self.sent), "dead": [self.urls[i] for i in sorted(self.dead)],
                **self.limiter.report()}


class HttpTransport:
    """`keys.Transport` for one prompt's requests (`affinity`: which server serves them)."""

    def __init__(self, pool: ServerPool, dialect: EngineDialect, affinity: int = 0) -> None:
        self.pool, self.dialect, self.affinity = pool, dialect, affinity
        self.server = pool.urls[0]
        self.max_top_n, self.first_top_n = dialect.max_top_n, dialect.first_top_n

    def _ask(self, path_body: tuple[str, dict], read):
        path, body = path_body
        reply, url = self.pool.post_from(path, body, self.affinity)
        self.server = url  # the server of the last reply, for the key walk's errors (keys.KeyDecoder)
        try:
            return read(reply)
        except Unsupported as e:  # a feature the server stopped honouring mid-run: one line naming it
            raise Unsupported(f"{url} ({self.dialect.name}) {path}: {printable(str(e))}") from None
        except (BadReply, KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as e:
            # a reader that met a shape it did not expect (a list where an object goes, a string for a
            # number) is a bad reply too: one line naming the server that sent it and what failed
            what = str(e) if isinstance(e, BadReply) else f"{type(e).__name__}: {e}"
            raise BadServerReply(f"{url} ({self.dialect.name}) {path}: {printable(what)}") from None

    def continue_(self, prompt_ids, grammar, *, max_tokens, temperature, seed) -> Continuation:
        return self._ask(self.dialect.continue_body(prompt_ids, grammar, max_tokens=max_tokens,
                                                    temperature=temperature, seed=seed), self.dialect.read_continue)

    def next_tokens(self, prompt_ids, allowed, top_n) -> NextTokens:
        """The allowed ids' raw log-probs; on an engine that names at most `dialect.ids_per_request`
        ids a request (vLLM's `logprob_token_ids`, 128), a wider trie node is asked in chunks, side by
        side, and the chunks' exact values merged: no top-n list has to be long enough."""
        chunk = getattr(self.dialect, "ids_per_request", None)
        allowed = sorted(set(allowed))
        if not chunk or len(allowed) <= chunk:
            return self.next_one(prompt_ids, allowed, top_n)
        parts = [allowed[i:i + chunk] for i in range(0, len(allowed), chunk)]
        got = causal.map_threads(lambda part: self.next_one(prompt_ids, part, top_n), parts, max_workers=len(parts))
        merged = NextTokens(complete=all(g.complete for g in got), floor=min(g.floor for g in got))
        for g in got:
            merged.logprobs.update(g.logprobs)
        return merged

    def next_one(self, prompt_ids, allowed, top_n) -> NextTokens:
        """The allowed ids' raw log-probs in one request, however many they are (no chunking, ids
        sent in the order given): `next_tokens` asks each chunk with it, and the engine probe asks
        the widest request a beam expansion makes with it, to learn whether the server accepts that
        many (`probe.probe_server`)."""
        return self._ask(self.dialect.next_body(prompt_ids, allowed, top_n),
                         lambda r: self.dialect.read_next(r, allowed))

    def score(self, prompt_ids, continuation) -> list[float]:
        return self._ask(self.dialect.score_body(prompt_ids, continuation),
                         lambda r: self.dialect.read_score(r, len(prompt_ids), continuation))
