"""The one interface between the harness and every memory method (SCG-Mem and baselines).

The harness calls, per conversation::

    method = instantiate(cfg.method, llm=llm, embedder=embedder)   # one object per conversation
    method.ingest(conversation, rng)        # build the memory (or load_state_dict from cache)
    for question in scored questions:
        recall = method.recall(question.question, budget_tokens=..., rng=rng_for(question))
        # recall.context goes into the protocol's answer prompt;
        # recall.dia_ids are the turns whose text is in that context (evidence recall).

A method knows nothing about scoring; the harness knows nothing about tries or gists.

Example (the trivial method, last k turns)::

    class LastTurns(MemoryMethod):
        def ingest(self, conversation, rng):
            self.turns = conversation.turns
        def recall(self, question, *, budget_tokens, rng):
            kept = self.turns[-self.k:]
            return Recall(render_turns(kept), [t.dia_id for t in kept])
"""
from __future__ import annotations

import abc
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from scgmem.data.locomo import Conversation, Turn


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
    """Base class of all memory methods. Subclasses set `name` and implement ingest/recall.

    Args:
        llm: the shared `scgmem.llm.LLM` (or a fake with the same interface).
        embedder: the shared `scgmem.embedder.Embedder`, or None for methods without one.
    """

    name: str = "base"
    # Methods whose ingestion takes hours (A-MEM: ~3 LLM calls a turn) checkpoint after every
    # session: the harness sets `session_checkpoint`, and on a restart loads the last
    # checkpoint's state_dict and sets `resume_after_session`; `ingest` then skips the
    # sessions up to it. A killed ingest loses at most one session.
    resumable: bool = False

    def __init__(self, llm, embedder=None) -> None:
        self.llm = llm
        self.embedder = embedder
        self.deviations: Counter[str] = Counter()  # non-faithful fallbacks, by kind
        self.session_checkpoint: Callable[[int], None] | None = None
        self.resume_after_session = 0

    # -- the two calls --------------------------------------------------------------
    @abc.abstractmethod
    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        """Build the memory of one conversation, turn by turn (session dates included)."""

    @abc.abstractmethod
    def recall(self, question: str, *, budget_tokens: int, rng: np.random.Generator) -> Recall:
        """Return the context for `question`, at most `budget_tokens` tokens long."""

    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        """Recall for several questions; methods that batch their LLM calls override this."""
        return [self.recall(q, budget_tokens=b, rng=r) for q, b, r in zip(questions, budget_tokens, rngs)]

    def sessions_to_ingest(self, conversation: Conversation):
        """The sessions left after `resume_after_session` (all of them on a fresh ingest)."""
        return [s for s in conversation.sessions if s.index > self.resume_after_session]

    def session_done(self, index: int) -> None:
        """Call after session `index` is fully in the state (resumable methods)."""
        if self.session_checkpoint is not None:
            self.session_checkpoint(index)

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
        """Counters for the summary: `deviations` plus method-specific ones.

        Methods that generate keys report `keys_generated` and `keys_outside_schema`
        (the structural hallucination rate is their ratio).
        """
        return {"deviations": dict(self.deviations)}


def render_turn(turn: Turn, style: str = "amem") -> str:
    """One turn as memory text. amem: `speaker: [Image: caption] text`; locomo: `speaker said, "text" [shares caption]`."""
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
