"""Dense RAG, a generic baseline (ours): top-k turns by cosine similarity, shown in chronological order.

Not LoCoMo's RAG and not in the paper's Table 1. Each turn is embedded as
`speaker: [Image: caption] text` (A-MEM's rendering) with the configured embedder (MiniLM by
default); the question is embedded verbatim; the k (10, A-MEM's retrieve_k) best turns are
printed in chronological order under DATE headers, cut to the token budget (lowest-ranked
first). LoCoMo's own RAG (`evaluate_gpts.py`: date-prefixed units in rank order; dialogs,
observations or session summaries) is `method=rag_locomo` (baselines/rag/locomo.py).
"""
from __future__ import annotations

import numpy as np

from scgmem.api import Conversation, MemoryMethod, Recall, dia_order, render_turn, render_turns_by_date
from scgmem.api.settings import check_embedder, check_int
from scgmem.llm.embedder import cosine_top_k


class DenseRAG(MemoryMethod):
    """Generic dense RAG over turns (see the module docstring).

    Args:
        k: turns retrieved per question (A-MEM's retrieve_k default 10).
    """

    name = "rag"

    def __init__(self, llm, embedder=None, k: int = 10) -> None:
        super().__init__(llm, embedder)
        check_embedder("rag", embedder)
        check_int("k", k)
        self.k = k
        self.turns = []
        self.vectors = np.zeros((0, 0), dtype=np.float32)

    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        self.turns = conversation.turns
        self.vectors = self.embedder.encode([render_turn(t) for t in self.turns])  # (n_turns, dim)

    def recall_batch(self, questions, *, budget_tokens, rngs):
        queries = self.embedder.encode(list(questions))  # (n_questions, dim)
        out = []
        for query, budget in zip(queries, budget_tokens):
            ranked = [self.turns[i] for i in cosine_top_k(query, self.vectors, self.k)]
            while ranked and self.llm.count_tokens(render_turns_by_date(sorted_turns(ranked))) > budget:
                ranked.pop()  # drop the lowest-ranked turn first
            kept = sorted_turns(ranked)
            out.append(Recall(render_turns_by_date(kept), [t.dia_id for t in kept]))
        return out

    def memory_settings(self) -> dict:
        return {"embedder": getattr(self.embedder, "name", None)}

    def stats(self) -> dict:
        return {"deviations": dict(self.deviations),
                "baseline": (f"generic dense RAG (ours, not LoCoMo's RAG): "
                             f"{getattr(self.embedder, 'name', 'embedder')} over turns, k={self.k}, chronological")}


class LastTurns(MemoryMethod):
    """The trivial method: the last k turns. Keeps the whole pipeline testable in seconds."""

    name = "last_turns"

    def __init__(self, llm, embedder=None, k: int = 20) -> None:
        super().__init__(llm, embedder)
        check_int("k", k)
        self.k = k
        self.turns = []

    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        self.turns = conversation.turns

    def recall_batch(self, questions, *, budget_tokens, rngs):
        return [self._last_turns(budget) for budget in budget_tokens]

    def _last_turns(self, budget_tokens: int) -> Recall:
        kept = list(self.turns[-self.k:])
        while kept and self.llm.count_tokens(render_turns_by_date(kept)) > budget_tokens:
            kept.pop(0)
        return Recall(render_turns_by_date(kept), [t.dia_id for t in kept])


def sorted_turns(turns):
    """Turns in chronological order."""
    return sorted(turns, key=lambda t: dia_order(t.dia_id))
