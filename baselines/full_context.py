"""The paper's "LoCoMo" row: no memory, the dated transcript itself (LoCoMo task_eval [L1]).

docs/methods.md, section Full context. The transcript is filled from the newest turn
backwards within the token budget and stops at the first turn that does not fit, so the
oldest turns drop; every session that is fully or partly included keeps its DATE header.

The budget is rounded down to a multiple of `budget_step` tokens first. Questions differ in
prompt length by a few tokens, so without rounding each would cut the transcript at another
oldest turn and no two prompts would share a prefix; with it, the questions of a conversation
get the same transcript, which the backend's prefix cache prefills once (an 8K-token
transcript is ~60 s of CPU prefill per question otherwise). The price is at most
`budget_step - 1` tokens of the oldest context; `budget_step=1` is the unrounded fill.
"""
from __future__ import annotations

import numpy as np

from scgmem.api import Conversation, MemoryMethod, Recall, render_turn
from scgmem.api.settings import check_choice, check_int


class FullContext(MemoryMethod):
    """Args:
        style: turn rendering, "locomo" (`{speaker} said, "{text}"`, as LoCoMo) or "amem".
        budget_step: the budget is rounded down to a multiple of this many tokens (see above).
    """

    name = "full_context"

    def __init__(self, llm, embedder=None, style: str = "locomo", budget_step: int = 256) -> None:
        super().__init__(llm, embedder)
        check_choice("style", style, ("locomo", "amem"))
        check_int("budget_step", budget_step)
        self.style = style
        self.budget_step = budget_step
        self.header = ""
        self.turns = []

    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        self.turns = conversation.turns
        self.header = (f"Below is a conversation between two people: {conversation.speaker_a} and "
                       f"{conversation.speaker_b}. The conversation takes place over multiple days "
                       f"and the date of each conversation is written at the beginning of the conversation.\n\n")
        # Token counts are computed once here, not per question (the transcript is fixed).
        self._turn_tokens = [self.llm.count_tokens(render_turn(t, self.style)) + 1 for t in self.turns]

    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        """The newest turns that fit each question's budget; no LLM call."""
        return [self._newest_turns(budget) for budget in budget_tokens]

    def _newest_turns(self, budget_tokens: int) -> Recall:
        budget_tokens -= budget_tokens % self.budget_step
        used = self.llm.count_tokens(self.header)
        kept: list[int] = []
        sessions_seen: set[int] = set()
        for i in range(len(self.turns) - 1, -1, -1):
            turn = self.turns[i]
            cost = self._turn_tokens[i]
            if turn.session not in sessions_seen:  # the session's DATE/CONVERSATION header
                cost += self.llm.count_tokens(f"DATE: {turn.date_time}\nCONVERSATION:\n") + 1
            if used + cost > budget_tokens:
                break
            used += cost
            sessions_seen.add(turn.session)
            kept.append(i)
        kept.reverse()
        lines = []
        session = None
        for i in kept:
            t = self.turns[i]
            if t.session != session:
                session = t.session
                lines.append(f"\nDATE: {t.date_time}\nCONVERSATION:")
            lines.append(render_turn(t, self.style))
        context = self.header + "\n".join(lines).strip() if kept else ""
        return Recall(context, [self.turns[i].dia_id for i in kept], {"n_turns_kept": len(kept)})

    def memory_settings(self) -> dict:
        return {"style": self.style}
