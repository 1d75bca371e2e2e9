"""Shared test helpers for the baselines: a call-counting scripted LLM, a bag-of-words embedder and a
tiny conversation builder."""
from __future__ import annotations

import time


from scgmem.api import Conversation, Session, Turn
from scgmem.llm.doubles.fake import BagEmbedder, ScriptedLLM  # noqa: F401 (BagEmbedder: imported from here by the tests)


class CountingLLM(ScriptedLLM):
    """ScriptedLLM that also records the size of every generate call (to check batching)."""

    def __init__(self, script, **kw):
        super().__init__(script, **kw)
        self.calls: list[int] = []

    def generate(self, prompts, **kw):
        self.calls.append(len(prompts))
        return super().generate(prompts, **kw)


def measured_ingest(method, conversation: Conversation, llm, rng) -> tuple[float, int]:
    """Ingest `conversation` on the embedded model; returns (seconds, LLM calls) it took."""
    before = llm.usage.snapshot().get("other", {}).get("calls", 0)
    t0 = time.perf_counter()
    method.ingest(conversation, rng)
    seconds = time.perf_counter() - t0
    return seconds, llm.usage.snapshot()["other"]["calls"] - before


def conversation(sessions: list[list[tuple[str, str]]], dates=None) -> Conversation:
    """A conversation of (speaker, text) turns per session; session s is dated `dates[s-1]` or s May 2023."""
    built = []
    for s, turns in enumerate(sessions, start=1):
        date = dates[s - 1] if dates else f"1:56 pm on {s} May, 2023"
        built.append(Session(s, date, tuple(Turn(f"D{s}:{i}", spk, text, s, date)
                                            for i, (spk, text) in enumerate(turns, start=1))))
    return Conversation("conv-test", "Caroline", "Melanie", tuple(built), ())


CONV = conversation([
    [("Caroline", "I went to a LGBTQ support group yesterday."), ("Melanie", "I painted a sunrise by the lake.")],
    [("Caroline", "I am researching adoption agencies."), ("Melanie", "We went camping with the kids.")],
])
