"""Which earlier requests a served request could have depended on: its causal parents.

A run's jobs (one per conversation, `scgmem.llm.scheduler`) are sequential programs, but the
requests they send are not all sent by the job's own thread: the batching front serves them from a
thread pool, `llm.map` runs sub-jobs, and the served backend fans a call out over threads (one per
prompt, per beam, per id chunk). A `Strand` is one such thread of control's causal view: a name
that depends only on the program (job index, then the index of each fork taken), and the ids of the
requests whose replies it has seen (its frontier).

- A request recorded on a strand (scgmem/llm/served/recorder.py) gets the id `<strand>#<n>` (its
  n-th request) and, as parents, the strand's frontier; the frontier then becomes that request
  alone: whatever the strand sends next was sent after this reply arrived.
- A fork (`map_threads`, `llm.map`) gives each branch a child strand starting from the parent's
  frontier; the join sets the parent's frontier to the union of the branches' frontiers.
- A conversation's job starts with an empty frontier: its first request has no parents.

The names and frontiers depend only on what the programs ask and the replies they get, never on
timing or `model.max_in_flight`: a run recorded at any in-flight limit gives the same graph
(tests/llm/test_causal_recording.py). The current strand travels in a context variable, set
explicitly wherever work moves to another thread (a new thread starts with an empty context).
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Sequence

_current: contextvars.ContextVar["Strand | None"] = contextvars.ContextVar("scgmem_strand", default=None)
_loose = threading.local()  # a thread outside every job: its own strand (its requests chain in order)
_loose_names = itertools.count()


class Strand:
    """One thread of control's causal view (module docstring). Not shared between threads: every
    branch of a fork gets its own, so its fields need no lock."""

    def __init__(self, name: str, seen: Iterable[str] = ()) -> None:
        self.name, self.seen = name, tuple(sorted(set(seen)))
        self.sent = self.forks = 0

    def next_request(self) -> tuple[str, list[str]]:
        """(id, parents) of the request whose reply just arrived on this strand; it becomes the frontier."""
        rid, parents = f"{self.name}#{self.sent}", list(self.seen)
        self.sent += 1
        self.seen = (rid,)
        return rid, parents

    def fork(self, n: int) -> list["Strand"]:
        k, self.forks = self.forks, self.forks + 1
        return [Strand(f"{self.name}.{k}-{i}", self.seen) for i in range(n)]

    def join(self, branches: Sequence["Strand"]) -> None:
        if branches:
            self.seen = tuple(sorted({rid for b in branches for rid in b.seen}))


def current() -> Strand:
    """The calling thread's strand; a thread outside every job gets one of its own, named `t<n>`."""
    strand = _current.get()
    if strand is None:
        strand = getattr(_loose, "strand", None)
        if strand is None:
            strand = _loose.strand = Strand(f"t{next(_loose_names)}")
    return strand


def bind(strand: Strand) -> None:
    """Make `strand` the calling thread's for good (a job's own thread, at its start)."""
    _current.set(strand)


@contextlib.contextmanager
def using(strand: Strand):
    token = _current.set(strand)
    try:
        yield strand
    finally:
        _current.reset(token)


def map_threads(fn: Callable, items: Sequence, max_workers: int) -> list:
    """`list(ThreadPoolExecutor(max_workers).map(fn, items))`, each item on its own branch of a fork of
    the calling strand, joined when all are done (also when one fails)."""
    items = list(items)
    parent = current()
    branches = parent.fork(len(items))

    def run(pair):
        branch, item = pair
        with using(branch):
            return fn(item)

    try:
        with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
            return list(pool.map(run, zip(branches, items)))
    finally:
        parent.join(branches)
