"""The one interface between the harness and every memory method (SCG-Mem and baselines).

The harness calls, per conversation::

    method = instantiate(cfg.method, llm=llm, embedder=embedder)   # one object per conversation
    method.ingest(conversation, rng)        # build the memory (or load_state_dict from cache)
    for chunk of scored questions:
        recalls = method.recall_batch([q.question for q in chunk], budget_tokens=[...],
                                      rngs=[rng_for(q) for q in chunk])
        # recall.context goes into the protocol's answer prompt;
        # recall.dia_ids are the turns whose text is in that context (evidence recall).

A method implements `ingest` and `recall_batch`; `recall(question, ...)` is the batch of one.
A method knows nothing about scoring; the harness knows nothing about tries or gists.

Example (the trivial method, the last 20 turns; budget trimming left out)::

    class LastTurns(MemoryMethod):
        name = "last_turns"

        def ingest(self, conversation, rng):
            self.turns = conversation.turns

        def recall_batch(self, questions, *, budget_tokens, rngs):
            kept = self.turns[-20:]
            context = render_turns_by_date(kept)
            return [Recall(context, [t.dia_id for t in kept]) for _ in questions]
"""
from __future__ import annotations

import abc
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from scgmem.api.types import Conversation, Turn
from scgmem.llm.protocol import Needs


@dataclass
class Recall:
    """What a method hands to the answer prompt.

    Attributes:
        context: text placed in the prompt as the memory context.
        dia_ids: dia_ids of the turns whose text is (wholly or as a gist) in `context`.
        extras: method-specific fields copied into the prediction record
            (SCG-Mem: `seed_keys`, `context_keys`).
    """

    context: str
    dia_ids: list[str]
    extras: dict[str, Any] = field(default_factory=dict)


class MemoryMethod(abc.ABC):
    """Base class of all memory methods. Subclasses set `name` and implement `ingest` and `recall_batch`.

    Args:
        llm: the shared `scgmem.llm.LLM` (or a fake with the same interface).
        embedder: the shared `scgmem.llm.embedder.Embedder`, or None for methods without one.
    """

    name: str = "base"
    # What the method asks of its model beyond free text (scgmem.llm.protocol.Needs): the harness
    # asks the model once, before the first conversation (make_ready), and refuses in one line.
    needs: Needs = Needs()
    # Methods whose ingestion takes hours (A-MEM: ~3 LLM calls a turn) checkpoint after every
    # session: the harness sets `session_checkpoint`, and on a restart loads the last
    # checkpoint's state_dict and sets `resume_after_session`; `ingest` then skips the
    # sessions up to it. A killed ingest loses at most one session.
    resumable: bool = False

    def __init__(self, llm, embedder=None) -> None:
        self.llm = llm
        self.embedder = embedder
        self.deviations: Counter[str] = Counter()  # non-faithful fallbacks, by kind
        self.counters: Counter[str] = Counter()  # method-specific event counts (LLM calls, parses, ...)
        self.session_checkpoint: Callable[[int], None] | None = None
        self.resume_after_session = 0

    # -- the two calls --------------------------------------------------------------
    @abc.abstractmethod
    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        """Build the memory of one conversation, turn by turn (session dates included)."""

    @abc.abstractmethod
    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        """The context of each question, at most its `budget_tokens` tokens long, one `Recall` per question.

        The harness passes a chunk of questions at once so that a method can batch its LLM calls;
        `rngs[i]` is question i's own generator (the same whatever the chunk).
        """

    def recall(self, question: str, *, budget_tokens: int, rng: np.random.Generator) -> Recall:
        """The context for one question: `recall_batch` of one."""
        return self.recall_batch([question], budget_tokens=[budget_tokens], rngs=[rng])[0]

    def sessions_to_ingest(self, conversation: Conversation):
        """The sessions left after `resume_after_session` (all of them on a fresh ingest)."""
        return [s for s in conversation.sessions if s.index > self.resume_after_session]

    def session_done(self, index: int) -> None:
        """Call after session `index` is fully in the state (resumable methods)."""
        if self.session_checkpoint is not None:
            self.session_checkpoint(index)

    def count(self, key: str, n: int = 1) -> None:
        """Add `n` to the counter `key` (reported by the default `stats`)."""
        self.counters[key] += n

    # -- caching and reporting ------------------------------------------------------
    def memory_settings(self) -> dict[str, Any]:
        """Every setting that changes the *built memory* (not recall-only knobs like k).

        The cache key is built from this, the model and the conversation's content.
        """
        return {}

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state after `ingest` (never pickled)."""
        raise NotImplementedError(f"{type(self).__name__} does not support caching")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support caching")

    def export(self) -> dict[str, Any] | None:
        """A human-readable dump of the memory (SCG-Mem: memory/<sample_id>.json)."""
        return None

    def stats(self) -> dict[str, Any]:
        """Counters for the summary: `deviations`, then every counter of `count`.

        Methods that generate keys report `keys_generated` and `keys_outside_schema`
        (the structural hallucination rate is their ratio).
        """
        return {"deviations": dict(self.deviations), **self.counters}


def render_turn(turn: Turn, style: str = "amem") -> str:
    """One turn as memory text.

    amem: `speaker: [Image: caption] text`; locomo: `speaker said, "text" [shares caption]`.
    """
    if style == "locomo":
        shares = f" [shares {turn.caption}]" if turn.caption else ""
        return f'{turn.speaker} said, "{turn.text}"{shares}'
    image = f"[Image: {turn.caption}] " if turn.caption else ""
    return f"{turn.speaker}: {image}{turn.text}"


def render_turns_by_date(turns: list[Turn], style: str = "amem") -> str:
    """Turns in chronological order, with a DATE header whenever the session changes."""
    lines: list[str] = []
    session = None
    for t in turns:
        if t.session != session:
            session = t.session
            lines.append(f"DATE: {t.date_time}")
        lines.append(render_turn(t, style))
    return "\n".join(lines)


def dia_order(dia_id: str) -> tuple[int, int]:
    """Chronological sort key of a dia_id 'D<session>:<turn>'."""
    s, t = dia_id[1:].split(":")
    return int(s), int(t)


def truncate_to_tokens(llm, text: str, budget: int) -> str:
    """The longest word prefix of `text` with at most `budget` tokens (binary search)."""
    if budget <= 0 or not text:
        return ""
    if llm.count_tokens(text) <= budget:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if llm.count_tokens(" ".join(words[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])
