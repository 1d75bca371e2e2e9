"""Requests in flight together on a served model, and predictions that do not depend on it.

- The batching front serves the waiting groups of a served model at once (constrained calls of
  different conversations too), each counted into its own meter; replies, usage and clocks are
  handed out in group order.
- The pipeline answers a conversation's chunks together on a served model; every method's
  predictions.jsonl equals the local-style run's, whatever `run.parallel_conversations`.
- Through the real HTTP client: predictions do not depend on `model.max_in_flight` (1 vs 8)
  on a scripted server that answers in random order.
"""
from __future__ import annotations

import json
import random
import re
import threading
import time

import pytest

from scgmem.testing.scripted import fake_pipeline
from scgmem.llm.doubles.fake import ScriptedLLM, echo_reply
from scgmem.llm.scheduler import BatchingFront
from scgmem.llm.usage import UsageMeter
from tests.llm.servers import ScriptedServer

METHODS = ["full_context", "memorybank", "amem", "memgpt", "readagent"]
LATENCY = re.compile(rb'"latency_s": [0-9.e-]+')


class ServedScripted(ScriptedLLM):
    """The scripted model as a served one: `served`, `counting_into`, and calls that may run at once
    (each sleeps a random moment, so they finish in any order); records the most calls at once."""

    served = True

    def __init__(self, *args, seed: int = 0, **kw) -> None:
        self._local, self._base = threading.local(), UsageMeter()
        super().__init__(*args, **kw)
        self.rand, self.lock, self.live, self.peak = random.Random(seed), threading.Lock(), 0, 0

    @property
    def usage(self) -> UsageMeter:
        return getattr(self._local, "meter", None) or self._base

    @usage.setter
    def usage(self, meter: UsageMeter) -> None:
        self._base = meter

    def counting_into(self, meter):
        outer = self

        class Scope:
            def __enter__(self):
                outer._local.meter = meter

            def __exit__(self, *exc):
                outer._local.meter = None
        return Scope()

    rendezvous: threading.Barrier | None = None  # set: every call waits until that many are in flight

    def generate(self, prompts, **kw):
        with self.lock:
            self.live += 1
            self.peak = max(self.peak, self.live)
            delay = self.rand.random() * 0.003
        if self.rendezvous is not None:
            try:  # calls that are truly in flight together meet here; sequential ones time out
                self.rendezvous.wait(timeout=10)
            except threading.BrokenBarrierError:
                pass
        time.sleep(delay)
        try:
            return super().generate(prompts, **kw)
        finally:
            with self.lock:
                self.live -= 1


def constrained_jobs(front, n_jobs=3, steps=3):
    """Jobs whose every call carries a constraint (never merged: each its own group)."""
    def job(i):
        def run():
            text, out = f"c{i}", []
            for s in range(steps):
                with front.current().llm.usage.under("ingest"):
                    [[g]] = front.current().llm.generate([f"{text} s{s}"], constraint=object())
                text = g.text
                out.append(text)
            return out, front.current().llm.usage.snapshot()
        return run
    return [job(i) for i in range(n_jobs)]


def test_constrained_calls_of_different_jobs_are_in_flight_together():
    results = {}
    for name, llm in (("plain", ScriptedLLM(lambda p: "re " + p.split()[-1])),
                      ("served", ServedScripted(lambda p: "re " + p.split()[-1]))):
        front = BatchingFront(llm)
        if name == "served":  # the peak below does not hang on timing: three calls in flight meet
            llm.rendezvous = threading.Barrier(3)
        results[name] = (front.run(constrained_jobs(front), width=3), llm.usage.snapshot(), front.calls, front.rows)
        if name == "served":
            assert llm.peak == 3  # the three jobs' constrained calls at once
    assert results["served"] == results["plain"]  # replies, each job's usage, the model's usage, calls


@pytest.fixture(scope="module")
def three_conversations(locomo_path):
    from scgmem.data.locomo import load_locomo, select

    conversations, _ = load_locomo(locomo_path)
    return select(conversations, ["conv-26", "conv-30", "conv-41"], max_sessions=1)


@pytest.mark.parametrize("method", METHODS)
def test_served_predictions_equal_local_style_at_any_width(method, three_conversations, tmp_path):
    files = {}
    for name, parallel, llm in (("local", 1, ScriptedLLM(echo_reply)), ("served1", 1, ServedScripted(echo_reply, seed=1)),
                                ("served3", 3, ServedScripted(echo_reply, seed=2))):
        pipeline = fake_pipeline(method, tmp_path / name, parallel=parallel, llm=llm, answer_batch_size=2)
        pipeline.run(three_conversations)
        files[name] = LATENCY.sub(b"", (tmp_path / name / "predictions.jsonl").read_bytes())
        if name == "served1":  # one conversation at a time, its chunks' answers still together
            assert llm.peak > 1
    assert files["served1"] == files["local"]  # same lines, same order
    assert sorted(files["served3"].splitlines()) == sorted(files["local"].splitlines())


def _completion_reply(seed: int):
    rand, lock = random.Random(seed), threading.Lock()

    def reply(body):
        with lock:
            delay = rand.random() * 0.01
        time.sleep(delay)  # replies arrive in another order than sent
        text = echo_reply(body["prompt"])
        return 200, {"object": "text_completion", "model": "tiny-served",
                     "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": len(text.split())}}
    return reply


@pytest.mark.parametrize("method", ["memorybank", "readagent"])
def test_predictions_do_not_depend_on_max_in_flight(method, three_conversations, tmp_path):
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir
    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM

    tokenizer = resolve_model_dir(None, **EMBEDDED)
    files, peaks = {}, {}
    for bound in (1, 8):
        with ScriptedServer(_completion_reply(bound)) as server:
            llm = OpenAICompatibleLLM(server.url, server.model, tokenizer=tokenizer, api="completions",
                                      max_in_flight=bound, retries=0, record_requests=True)
            fake_pipeline(method, tmp_path / f"b{bound}", parallel=3, llm=llm, answer_batch_size=2).run(
                three_conversations)
            peaks[bound] = llm.pool.limiter.peak
            sent = len(server.bodies)
        files[bound] = LATENCY.sub(b"", (tmp_path / f"b{bound}" / "predictions.jsonl").read_bytes())
        recorded = (tmp_path / f"b{bound}" / "requests.jsonl").read_text().splitlines()
        assert len(recorded) == sent and all(json.loads(line)["completion_tokens"] is not None for line in recorded)
    assert files[1] == files[8] and files[1].count(b"\n") > 0
    assert peaks[1] == 1 and 1 < peaks[8] <= 8
