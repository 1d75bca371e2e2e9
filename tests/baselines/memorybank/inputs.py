"""Inputs for MemoryBank's tests: a bag-of-words embedder, scripted draws, small conversations
and scripted summaries, and a bank built from them."""
from __future__ import annotations

import re
import zlib

import numpy as np

from scgmem.baselines.memorybank.method import MemoryBank
from scgmem.api import Conversation, Session, Turn
from tests.baselines import CountingLLM


class BagEmbedder:
    """Deterministic bag-of-words vectors (crc32 buckets), unit length; stop-ish words ignored."""

    name = "bag"
    IGNORE = {"conversation", "content", "on", "may", "2023", "pm", "1", "56", "a", "b", "the", "summary",
              "of", "is", "june"}

    def encode(self, texts):
        out = np.zeros((len(texts), 4096), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                if w not in self.IGNORE and not w.isdigit():
                    out[i, zlib.crc32(w.encode()) % 4096] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class FixedRng:
    """Stands in for np.random.Generator: `random()` returns the scripted draws in turn."""

    def __init__(self, draws):
        self.draws = list(draws)
        self.used = 0

    def random(self):
        value = self.draws[self.used % len(self.draws)]
        self.used += 1
        return value


def session(index: int, day: int, texts: list[tuple[str, str]], month: str = "May") -> Session:
    date = f"1:56 pm on {day} {month}, 2023"
    return Session(index, date, tuple(Turn(f"D{index}:{k}", spk, txt, index, date)
                                      for k, (spk, txt) in enumerate(texts, 1)))


def conv_of(*sessions: Session) -> Conversation:
    return Conversation("conv-x", "A", "B", tuple(sessions), ())


def summaries(event="They talked about zebras.", personality="A is kind; B is curious.",
              overall="Overall, zebras.", portrait="Both are friendly."):
    """Scripted replies to MemoryBank's prompts, by a phrase of each prompt (the portrait otherwise)."""
    routes = {"summarize the following dialogue": event, "personality traits and emotions of": personality,
              "highly concise summary of the following events": overall}

    def reply(prompt: str) -> str:
        return next((text for phrase, text in routes.items() if phrase in prompt), portrait)
    return reply


def build(conv, llm=None, rng=None, **kw) -> MemoryBank:
    bank = MemoryBank(llm or CountingLLM(summaries()), kw.pop("embedder", BagEmbedder()), **kw)
    bank.ingest(conv, rng if rng is not None else np.random.default_rng(0))
    return bank


THREE = conv_of(session(1, 1, [("A", "zebra stripes"), ("B", "lovely zebra"), ("A", "pottery class"),
                               ("B", "nice pottery")]),
                session(2, 3, [("A", "camping trip"), ("B", "tent rain")]),
                session(3, 4, [("A", "new job"), ("B", "congrats job")]))
