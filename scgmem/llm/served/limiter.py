"""One bound on the requests a served model has in flight (`model.max_in_flight`).

Every HTTP request of an `OpenAICompatibleLLM` takes a slot of its one `InFlightLimiter` for the
time of the POST (retries and back-off included) and gives it back when the reply is read: free
text, the constrained decoders' continuations, expansions and scores, and each id chunk of a wide
trie node. The slot wraps the POST itself, never a task that spawns further requests (a prompt's
decoder, a beam step), so a thread that waits for a slot holds none, and nested thread pools cannot
deadlock under the bound, however small.

Fair across the servers of a pool: a freed slot goes to the waiting request whose server has the
fewest requests in flight, the earliest among those; so a server whose requests pile up cannot take
every slot while another server idles, and no request waits forever (each grant is work-conserving:
a slot never stays free while a request waits).
"""
from __future__ import annotations

import contextlib
import itertools
import threading


class InFlightLimiter:
    """Args:
        limit: requests in flight at once, over all servers (>= 1).
        servers: how many servers share the slots.

    `peak` is the most requests seen in flight at once; `granted` the slots handed out.
    """

    def __init__(self, limit: int, servers: int = 1) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"model.max_in_flight must be a positive int, got {limit!r}")
        if servers < 1:
            raise ValueError(f"InFlightLimiter: servers must be >= 1, got {servers}")
        self.limit = limit
        self.in_flight = [0] * servers
        self.peak = self.granted = 0
        self._waiting: dict[int, int] = {}  # ticket -> server
        self._tickets = itertools.count()
        self._cond = threading.Condition()

    def _next(self) -> int:
        """The ticket the next free slot goes to: fewest in flight on its server, then the earliest."""
        return min(self._waiting, key=lambda t: (self.in_flight[self._waiting[t]], t))

    @contextlib.contextmanager
    def slot(self, server: int = 0):
        """Hold one of the `limit` slots for the request sent to `server` inside the block."""
        with self._cond:
            ticket = next(self._tickets)
            self._waiting[ticket] = server
            while sum(self.in_flight) >= self.limit or self._next() != ticket:
                self._cond.wait()
            del self._waiting[ticket]
            self.in_flight[server] += 1
            self.granted += 1
            self.peak = max(self.peak, sum(self.in_flight))
            self._cond.notify_all()  # another slot may be free: let the next waiter look
        try:
            yield
        finally:
            with self._cond:
                self.in_flight[server] -= 1
                self._cond.notify_all()

    def report(self) -> dict:
        return {"max_in_flight": self.limit, "peak_in_flight": self.peak, "requests": self.granted}
