"""A deterministic batching front between the memory methods and the one model.

Jobs (one per conversation) are written as sequential programs: `method.ingest(conv)` calls
`llm.generate` deep inside its loops. Each job runs in its own thread and sees a `WorkerLLM`,
whose `generate` hands the request to the front and waits. Threads were chosen over
coroutines or explicit request lists because they leave every method's code unchanged.

What makes the threads deterministic is a baton: exactly one thread runs at any moment.

1. Live workers run one at a time, in job order, each until it asks the model or finishes.
   A finished job's slot goes to the next job, which also runs until it asks or finishes,
   so at most `width` jobs are alive (that bounds memory).
2. When no worker can run (every live one waits on the model), the waiting requests are
   grouped by phase and decoding settings (max_new_tokens, temperature, beams, stop, ...),
   in order of the first worker of each group. Each group is one call of the real
   `generate` (which splits it into batches of `model.batch_size` rows and
   `model.max_batch_tokens` padded tokens); the results go back and step 1 repeats.

A batch therefore depends only on what the programs ask, never on timing. With width 1 each
request reaches the backend unchanged, so outputs equal those of calling the model directly.
Calls with a constraint or extra logits processors (SCG-Mem's schema constraint) carry per-call state tied
to their rows, so they are never merged: each is its own group.

On a served model (`llm.counting_into` exists: scgmem/llm/served/openai_compatible.py) the groups of
step 2 are not served one after another but all at once, each `generate` on its own thread: every
request of every waiting conversation, constrained ones included, is then in flight together, up to
`model.max_in_flight`. Each call counts into its own meter, and replies, usage and clocks are handed
out in group order once all are back, so nothing of a job's view depends on which call finished first.

The real model, its usage meter and every `generate` run on the thread that called `run`;
the tokenizer is used by the workers, one at a time. Usage is counted twice: in the real
meter by phase (exactly as without the front), and per worker in `WorkerLLM.usage`
(a merged call's counts are shared out by rows and tokens, exact to the call).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from scgmem.llm import causal
from scgmem.llm.usage import UsageMeter

# Which weight shares a merged call's count among its requests (default: rows).
_TOKEN_WEIGHTS = {"prompt_tokens": "prompt", "cached_prompt_tokens": "prompt", "generated_tokens": "generated"}


class Cancelled(BaseException):
    """Raised inside a worker whose run was abandoned (another job failed); not an `Exception`,
    so a method's error handling does not swallow it."""


@dataclass
class _Request:
    prompts: list[str]
    kwargs: dict
    phase: str

    def group_key(self, worker) -> tuple:
        if self.kwargs.get("processors") is not None or self.kwargs.get("constraint") is not None:
            return ("alone", id(worker))
        settings = tuple(sorted((k, _frozen(v)) for k, v in self.kwargs.items() if k not in ("seeds", "processors", "constraint")))
        return (self.phase, self.kwargs.get("seeds") is None, settings)


def _frozen(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


@dataclass
class _Worker:
    index: int
    job: Callable[[], Any]
    front: "BatchingFront"
    parent: "_Worker | None" = None  # set for the sub-jobs of `BatchingFront.map`
    state: str = "ready"  # ready | waiting (on the model) | joining (on its sub-jobs) | done
    request: _Request | None = None
    reply: Any = None
    reply_error: BaseException | None = None
    result: Any = None
    error: BaseException | None = None
    clock_s: float = 0.0  # seconds attributed to this job: its own running time + its share of calls
    resumed_at: float = 0.0
    children_left: int = 0
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    strand: causal.Strand | None = None  # its causal view (scgmem/llm/causal.py); a sub-job's is a fork's branch

    def __post_init__(self) -> None:
        self.strand = self.strand or causal.Strand(f"c{self.index}")  # a conversation starts with no parents
        # A sub-job acts for its parent: same view of the model, so the same usage meter and phase.
        self.llm = self.parent.llm if self.parent is not None else WorkerLLM(self)
        self.thread = threading.Thread(target=self._main, daemon=True, name=f"scgmem-job-{self.index}")
        self.thread.start()

    def _main(self) -> None:
        self.go.acquire()
        self.front._local.worker = self
        causal.bind(self.strand)
        try:
            if self.front._cancelled:
                raise Cancelled()
            self.result = self.job()
        except BaseException as e:  # handed to the front, which re-raises it on its thread
            self.error = e
        finally:
            self.clock_s += time.perf_counter() - self.resumed_at
            self.state = "done"
            self.front._baton.release()

    def clock(self) -> float:
        return self.clock_s + time.perf_counter() - self.resumed_at


class WorkerLLM:
    """What a job sees as its `llm`: the real model's attributes, its own usage meter, a
    `generate` that waits for the front, and `clock()` (seconds attributed to the job)."""

    def __init__(self, worker: _Worker) -> None:
        self._worker = worker
        self.usage = UsageMeter()

    def __getattr__(self, name):
        return getattr(self._worker.front.llm, name)

    def generate(self, prompts: Sequence[str], **kwargs) -> list:
        front = self._worker.front
        worker = front.current() or self._worker  # a sub-job calls through its parent's view
        return front._submit(worker, _Request(list(prompts), kwargs, self.usage.phase))

    def map(self, fn: Callable[[Any], Any], items: Sequence) -> list:
        """`[fn(x) for x in items]`, the calls running as sub-jobs whose requests batch
        (`BatchingFront.map`); for work items that do not depend on each other."""
        return self._worker.front.map(fn, items)

    def clock(self) -> float:
        return self._worker.clock()


class BatchingFront:
    """Args:
        llm: the real model (`scgmem.llm.LLM` or a stand-in with the same `generate`).

    `calls` / `rows`: per phase, how many real `generate` calls were made and how many prompts
    they carried (the measure of batching). `shapes`, when set to a list, receives
    (phase, max_new_tokens, num_beams, prompt lengths in characters) per call, for cost estimates.
    """

    def __init__(self, llm) -> None:
        self.llm = llm
        self.calls: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.shapes: list | None = None
        self._local = threading.local()
        self._live: list[_Worker] = []
        self._width = 1
        self._baton = threading.Semaphore(0)
        self._cancelled = False

    def current(self) -> _Worker | None:
        """The worker of the calling thread (None outside any job)."""
        return getattr(self._local, "worker", None)

    # ------------------------------------------------------------------ running jobs
    def run(self, jobs: Sequence[Callable[[], Any]], width: int) -> list:
        """Run `jobs` with at most `width` alive at once; returns their results in job order.
        The first job to fail stops the others (they see `Cancelled`) and its error is raised."""
        if width <= 0:  # the harness checks its own key (pipeline.check_run_settings); this layer names only its argument
            raise ValueError(f"BatchingFront.run: width must be positive, got {width}")
        if self.current() is not None:
            raise RuntimeError("BatchingFront.run cannot be nested inside one of its jobs")
        self._cancelled, self._width = False, width
        queue = deque(enumerate(jobs))
        results: list = [None] * len(jobs)
        self._live = live = []
        try:
            while queue or live:
                while True:  # step 1: run everyone who can run, refilling freed slots
                    while queue and sum(w.parent is None for w in live) < width:
                        index, job = queue.popleft()
                        live.append(_Worker(index, job, self))
                    ready = [w for w in live if w.state == "ready"]
                    if not ready:
                        break
                    for w in ready:
                        self._step(w)
                    for w in live:
                        if w.state != "done":
                            continue
                        if w.parent is not None:  # its parent resumes once all its sub-jobs are done
                            w.parent.children_left -= 1
                            if w.parent.children_left == 0:
                                w.parent.state = "ready"
                        elif w.error is not None:
                            raise w.error
                        else:
                            results[w.index] = w.result
                    live[:] = [w for w in live if w.state != "done"]
                if live:  # step 2: everyone alive waits on the model (or on its sub-jobs)
                    self._serve([w for w in live if w.state == "waiting"])
        except BaseException:
            self._cancel(list(live))
            raise
        return results

    def map(self, fn: Callable[[Any], Any], items: Sequence) -> list:
        """`[fn(x) for x in items]`. Inside a job of a front wider than 1 (any width on a served model), each call is a sub-job
        placed right after the calling job (so its rows keep the job order), and the caller waits
        until all are done; otherwise the calls run in turn, as plain code would. The sub-jobs
        share the caller's view of the model (usage meter and phase) and must not depend on
        each other; the first error among them is raised in the caller."""
        parent, items = self.current(), list(items)
        # width 1 keeps the local backend's calls exactly as plain code makes them; a served model's
        # replies do not depend on what else is in flight, so its sub-jobs run together at any width
        concurrent = self._width > 1 or getattr(self.llm, "served", False)
        if parent is None or not concurrent or len(items) <= 1:
            return [fn(x) for x in items]
        children = [_Worker(parent.index, (lambda x=x: fn(x)), self, parent=parent, strand=strand)
                    for x, strand in zip(items, parent.strand.fork(len(items)))]
        at = self._live.index(parent) + 1
        self._live[at:at] = children
        parent.children_left = len(children)
        parent.clock_s += time.perf_counter() - parent.resumed_at
        parent.state = "joining"
        self._baton.release()
        parent.go.acquire()
        parent.resumed_at = time.perf_counter()
        if self._cancelled:
            raise Cancelled()
        parent.clock_s += sum(c.clock_s for c in children)  # the sub-jobs' time is the caller's
        parent.strand.join([c.strand for c in children])
        for c in children:
            if c.error is not None:
                raise c.error
        return [c.result for c in children]

    def _step(self, worker: _Worker) -> None:
        """Hand the baton to `worker` until it asks the model or finishes."""
        worker.resumed_at = time.perf_counter()
        worker.go.release()
        self._baton.acquire()

    def _submit(self, worker: _Worker, request: _Request) -> list:
        if self._cancelled:
            raise Cancelled()
        worker.clock_s += time.perf_counter() - worker.resumed_at
        worker.request, worker.state = request, "waiting"
        self._baton.release()
        worker.go.acquire()
        worker.resumed_at = time.perf_counter()
        if self._cancelled:
            raise Cancelled()
        reply, error = worker.reply, worker.reply_error
        worker.reply = worker.reply_error = worker.request = None
        if error is not None:
            raise error
        return reply

    def _cancel(self, live: list[_Worker]) -> None:
        """Let every live thread unwind (its `finally` blocks run) before returning."""
        self._cancelled = True
        for w in live:
            if w.state != "done":
                w.go.release()
                self._baton.acquire()

    # ------------------------------------------------------------------ serving requests
    def _serve(self, waiting: list[_Worker]) -> None:
        groups: dict[tuple, list[_Worker]] = {}
        for w in waiting:  # job order, so the groups and their rows come in a fixed order
            groups.setdefault(w.request.group_key(w), []).append(w)
        members = list(groups.values())
        if getattr(self.llm, "served", False):
            # A served call is one request per prompt whatever it is merged with, so merging buys nothing,
            # and a merged call that fails loses the replies its other members already got (a server
            # gone mid-run): each job's call goes alone, all of them at once.
            members = [[w] for m in members for w in m]
        if len(members) > 1 and hasattr(self.llm, "counting_into"):
            start = time.perf_counter()
            # every group at once (the served model's limiter bounds the requests); handed out in group order
            with ThreadPoolExecutor(max_workers=len(members)) as pool:
                done = list(pool.map(lambda m: self._attempt(m, concurrent=True), members))
            elapsed = time.perf_counter() - start
            rows = sum(len(w.request.prompts) for m in members for w in m)
            for m, (outs, delta) in zip(members, done):
                if outs is not None:
                    self.llm.usage.merge({m[0].request.phase: delta})
                # the step's wall time shared by rows, so per-job clocks still add up to the run's
                self._deliver(m, outs, delta, elapsed * sum(len(w.request.prompts) for w in m) / max(1, rows))
            return
        for m in members:
            start = time.perf_counter()
            outs, delta = self._attempt(m, concurrent=False)
            self._deliver(m, outs, delta, time.perf_counter() - start)

    @staticmethod
    def _merged(requests: list[_Request]) -> tuple[list[str], dict]:
        if len(requests) == 1:
            return requests[0].prompts, requests[0].kwargs
        prompts = [p for r in requests for p in r.prompts]
        kwargs = dict(requests[0].kwargs)
        if kwargs.get("seeds") is not None:
            kwargs["seeds"] = [s for r in requests for s in r.kwargs["seeds"]]
        return prompts, kwargs

    def _attempt(self, members: list[_Worker], concurrent: bool):
        """(outputs, usage delta) of one group's call, or (None, the error)."""
        prompts, kwargs = self._merged([w.request for w in members])
        # the call's requests are sent from this thread (or the backend's own): on the job's strand.
        # Merged groups happen only on the local backend, which sends no requests.
        strand = members[0].strand if len(members) == 1 else causal.Strand("merged")
        try:
            with causal.using(strand):
                return self._call(prompts, kwargs, members[0].request.phase, concurrent)
        except Exception as e:
            return None, e

    def _deliver(self, members: list[_Worker], outs, delta, elapsed: float) -> None:
        """Hand a group's replies (or its error) to its workers."""
        requests = [w.request for w in members]
        if outs is None:
            if len(members) == 1:
                members[0].reply_error = delta
                members[0].state = "ready"
                return
            # Which request broke a merged call is unknown: serve each alone, so the error
            # reaches the job that caused it, as it would without the front.
            for w in members:
                start = time.perf_counter()
                outs, delta = self._attempt([w], concurrent=False)
                self._deliver([w], outs, delta, time.perf_counter() - start)
            return
        replies, at = [], 0
        for r in requests:
            replies.append(outs[at:at + len(r.prompts)])
            at += len(r.prompts)
        phase = requests[0].phase
        self.calls[phase] = self.calls.get(phase, 0) + 1
        self.rows[phase] = self.rows.get(phase, 0) + len(outs)
        if self.shapes is not None:
            kwargs = requests[0].kwargs
            self.shapes.append((phase, kwargs.get("max_new_tokens", 64), kwargs.get("num_beams", 1),
                                [len(p) for r in requests for p in r.prompts]))
        shares = _share_usage(delta, requests, replies)
        total_rows = sum(len(r.prompts) for r in requests)
        for w, reply, share in zip(members, replies, shares):
            w.llm.usage.merge({phase: share})
            w.clock_s += elapsed * len(reply) / max(1, total_rows)
            w.reply, w.state = reply, "ready"

    def _call(self, prompts: list[str], kwargs: dict, phase: str, concurrent: bool = False) -> tuple[list, dict]:
        if concurrent:  # its own meter: other calls count at the same time (merged by `_serve`, in order)
            meter = UsageMeter()
            with meter.under(phase), self.llm.counting_into(meter):
                outs = self.llm.generate(prompts, **kwargs)
            return outs, meter.snapshot().get(phase, {})
        usage = self.llm.usage
        before = usage.snapshot().get(phase, {})
        with usage.under(phase):
            outs = self.llm.generate(prompts, **kwargs)
        after = usage.snapshot().get(phase, {})
        return outs, {k: after.get(k, 0) - before.get(k, 0) for k in after}


def _share_usage(delta: dict, requests: list[_Request], replies: list[list]) -> list[dict]:
    """Split one call's usage counts among its requests: rows for calls and flags, prompt and
    generated tokens by each request's own generations (exact when those sum to the count)."""
    weights = {
        "rows": [len(r.prompts) for r in requests],
        "prompt": [sum(g[0].n_prompt_tokens for g in reply) for reply in replies],
        "generated": [sum(len(x.token_ids) for g in reply for x in g) for reply in replies],
    }
    shares: list[dict] = [{} for _ in requests]
    for key, total in delta.items():
        for share, part in zip(shares, _apportion(total, weights[_TOKEN_WEIGHTS.get(key, "rows")])):
            share[key] = part
    return shares


def _apportion(total: int, weights: list[int]) -> list[int]:
    """Integers proportional to `weights` that sum to `total` (largest remainder, ties to the first)."""
    if sum(weights) <= 0:
        weights = [1] * len(weights)
    scale = sum(weights)
    exact = [total * w / scale for w in weights]
    parts = [int(x // 1) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:total - sum(parts)]:
        parts[i] += 1
    return parts
