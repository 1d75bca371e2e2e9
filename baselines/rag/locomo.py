"""LoCoMo's RAG baseline (Maharana et al. 2024), as in its task_eval/evaluate_gpts.py [L1].

A database of units, each with its session's date and the dia_ids it comes from:

- `dialog`: every turn as `{speaker} said, "{text}"` (`prepare_for_rag`, rag_mode dialog);
- `observation`: the facts LoCoMo's annotation lists per session and speaker
  (`session_<i>_observation`: [fact, dia_id] pairs) in the data file;
- `summary`: the session summaries of the data file (`session_<i>_summary`).

At question time (`get_rag_context`) the question and the units are compared by dot product,
the top-k units are kept in rank order, best first (not in chronological order), and each is
printed as `{date_time}: {unit}`, one per line (summaries: separated by a blank line).
Over budget, the lowest-ranked units go first.

Adapted (listed in `stats()["settings_deviations"]`): the configured embedder (MiniLM) embeds
units and question alike, where LoCoMo used DRAGON, Contriever or DPR query/context encoders;
turns use their `text` (LoCoMo's annotated `clean_text` is not in the released file). A
summary unit counts its whole session as retrieved (LoCoMo scores it by session id).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from scgmem.api import Conversation, MemoryMethod, Recall
from scgmem.api.settings import check_choice, check_embedder, check_int, setting_error
from scgmem.llm.embedder import cosine_top_k

UNITS = ("dialog", "observation", "summary")
DIA_ID = re.compile(r"^D\d+:\d+$")


def split_dia_ids(value) -> list[str]:
    """An observation's evidence as a list: "D1:3", "D1:3, D1:5" or ["D1:3", ...] (`get_rag_context`)."""
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(v).strip() for v in items]


class LoCoMoRAG(MemoryMethod):
    """LoCoMo's RAG (see the module docstring).

    Args:
        k: units retrieved per question (LoCoMo sweeps 5, 10, 25 and 50).
        unit: "dialog", "observation" or "summary".
        data_path: the LoCoMo JSON holding the observations and summaries (unit != "dialog").
    """

    name = "rag_locomo"

    def __init__(self, llm, embedder=None, *, k: int = 5, unit: str = "dialog", data_path: str | None = None) -> None:
        super().__init__(llm, embedder)
        check_embedder("rag_locomo", embedder)
        check_int("k", k)
        check_choice("unit", unit, UNITS)
        if unit != "dialog" and not data_path:
            raise setting_error("data_path", f"the LoCoMo JSON with its annotations for method.unit={unit}", data_path)
        self.k, self.unit, self.data_path = k, unit, data_path
        self.texts: list[str] = []
        self.dates: list[str] = []
        self.ids: list[list[str]] = []
        self.vectors = np.zeros((0, 0), dtype=np.float32)

    # ------------------------------------------------------------------ ingest
    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        rows = self._dialogs(conversation) if self.unit == "dialog" else self._annotations(conversation)
        self.texts = [text for text, _, _ in rows]
        self.dates = [date for _, date, _ in rows]
        self.ids = [ids for _, _, ids in rows]
        self.vectors = self.embedder.encode(self.texts)  # (n_units, dim)

    @staticmethod
    def _dialogs(conversation: Conversation) -> list[tuple[str, str, list[str]]]:
        return [(f'{t.speaker} said, "{t.text}"', s.date_time, [t.dia_id])
                for s in conversation.sessions for t in s.turns]

    def _annotations(self, conversation: Conversation) -> list[tuple[str, str, list[str]]]:
        """Observations or summaries of the sessions the conversation holds (a slice keeps its own)."""
        sample = self._sample(conversation.sample_id)
        rows = []
        for s in conversation.sessions:
            if self.unit == "summary":
                summary = sample.get("session_summary", {}).get(f"session_{s.index}_summary")
                if summary:
                    rows.append((summary, s.date_time, [t.dia_id for t in s.turns]))
                else:
                    self.deviations["summary_missing"] += 1
                continue
            facts = sample.get("observation", {}).get(f"session_{s.index}_observation") or {}
            for speaker_facts in facts.values():
                for fact, evidence in speaker_facts:
                    ids = split_dia_ids(evidence)
                    good = [i for i in ids if DIA_ID.match(i)]
                    if len(good) < len(ids):
                        self.deviations["observation_bad_dia_id"] += len(ids) - len(good)
                    rows.append((fact, s.date_time, good))
        return rows

    def _sample(self, sample_id: str) -> dict:
        path = Path(self.data_path)
        try:
            samples = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: cannot read the LoCoMo annotations (method.data_path): {e}") from None
        for sample in samples:
            if sample.get("sample_id") == sample_id:
                return sample
        raise ValueError(f"{path}: no sample with field 'sample_id' == {sample_id!r} (method.data_path)")

    # ------------------------------------------------------------------ recall
    def recall_batch(self, questions, *, budget_tokens, rngs):
        queries = self.embedder.encode(list(questions))  # (n_questions, dim)
        return [self._context(cosine_top_k(q, self.vectors, self.k), b) for q, b in zip(queries, budget_tokens)]

    def _context(self, ranked: list[int], budget: int) -> Recall:
        """`get_rag_context`: `{date}: {unit}` in rank order; the lowest-ranked go first when over budget."""
        sep = "\n\n" if self.unit == "summary" else "\n"
        ranked = list(ranked)
        while True:
            context = sep.join(f"{self.dates[i]}: {self.texts[i]}" for i in ranked)
            if not ranked or self.llm.count_tokens(context) <= budget:
                break
            ranked.pop()
        ids = list(dict.fromkeys(d for i in ranked for d in self.ids[i]))
        return Recall(context, ids, {})

    # ------------------------------------------------------------------ reporting
    def memory_settings(self) -> dict:
        return {"embedder": getattr(self.embedder, "name", None), "unit": self.unit}

    def stats(self) -> dict:
        deviations = {"retriever": f"{getattr(self.embedder, 'name', 'embedder')} for question and units "
                                   "(LoCoMo: DRAGON, Contriever or DPR encoders)"}
        if self.unit == "dialog":
            deviations["dialog_text"] = "turn text (LoCoMo: its annotated clean_text, not in the released file)"
        if self.unit == "summary":
            deviations["summary_ids"] = "a summary counts its whole session (LoCoMo: the session id)"
        return {"deviations": dict(self.deviations), "unit": self.unit, "units": len(self.texts),
                "baseline": f"LoCoMo's RAG: {self.unit} units, top-{self.k} in rank order, date-prefixed",
                "settings_deviations": deviations}
