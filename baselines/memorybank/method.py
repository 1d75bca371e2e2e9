"""MemoryBank (Zhong et al. 2024, arXiv 2305.10250): dated memories, summaries, portrait, forgetting.

Our reimplementation after SiliconFriend's memory bank [M1] (forget_memory.py,
summarize_memory.py, local_doc_qa.py) and the LoCoMo port [M2]; docs/methods.md, section
MemoryBank:

- Memory units: a pair of consecutive turns by different speakers,
  `Conversation content on {date}: {s1}: {t1}; {s2}: {t2}` (leftover turns alone), and per
  session an event summary `The summary of the conversation on {date} is: ...`; all start at
  level 0 (never recalled) with anchor = the session date.
- LLM calls, greedy (docs/methods.md, "Decoding"): per session an event summary and a personality note of
  both speakers; after the last session a global summary of the daily summaries and a global
  portrait from the notes. None depends on the memory state, so the 2 x sessions calls go in
  one generate list and the 2 global calls in another.
- Retrieval: the question verbatim, cosine top-k (k=10, as the port and A-MEM) among the units
  alive, optional same-date neighbour merging up to `merge_chars` (CHUNK_SIZE=200), grouped by
  date in ascending order, under the global summary and the portrait.
- Forgetting, the Ebbinghaus curve, in either of the authors' two versions (`forgetting_curve`,
  baselines/memorybank/forgetting.py): `paper` (R = exp(-t/S), S = level + 1 <= 3, deleted at
  30 days) or `code` (their later commit: R = exp(-t*S/5), S = 1 + recalls uncapped, no cutoff,
  a day's summary kept while any of its dialogs is). Each time the clock advances to a new date
  (every session; QA happens on the last session's date, so no extra pass) every unit gets its
  draw. A recall strengthens the unit and resets its anchor to the current date
  (`update_memory_when_searched`, matched by unit id, not by date as the original). Recall is
  simulated as SiliconFriend does it: every incoming turn queries the memory (top-3, no LLM
  call) and strengthens its hits. Question-time retrieval does not strengthen: the clock does
  not move during QA, so in the faithful mode it could change nothing, and in `soft` mode it
  would make an answer depend on the order of the questions.

`forgetting` (reported in `stats()`):

- "stochastic" (DEFAULT, faithful): the curve deletes units; the global summary and portrait
  always survive (they are not units). After LoCoMo's median 6-day gap a never-recalled unit
  survives a pass with R = 0.25% (`paper`) or 30% (`code`); docs/methods.md gives what
  survives of conv-26. Without forgetting MemoryBank is dense retrieval over pairs and
  summaries, which `off` (and the `rag` baseline) already measure.
- "soft" (deviation): no deletion; rank by cos x R (the chosen curve) at QA time.
- "off" (deviation, = the LoCoMo port [M2]): no forgetting, rank by cos.

Tiny-LLM behaviour (counted in `deviations`): summaries are capped at
`summary_max_new_tokens` (400, the original max_tokens); repeated lines are stripped
(`summary_repeated_lines`, once per affected summary); empty summaries are dropped
(`empty_summary_dropped`: no unit, no line in the global prompt, or no global line in the
context); a global prompt that does not fit the window loses its oldest entries
(`global_prompt_truncated`, the original cut the prompt's start too). A session date that does
not parse is placed one day after the previous session (`unparsed_date`).
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np

from scgmem.baselines.greedy_calls import greedy_texts, strip_repeated_lines
from scgmem.baselines.locomo_text import parse_locomo_date, render_turn_line
from scgmem.baselines.memorybank.forgetting import ForgettingCurve
from scgmem.baselines.memorybank.prompts import (EVENT_PROMPT, OVERALL_EVENT_ENTRY, OVERALL_EVENT_PROMPT,
                                          OVERALL_PERSONALITY_ENTRY, OVERALL_PERSONALITY_PROMPT, PERSONALITY_PROMPT,
                                          SYSTEM_PROMPT)
from scgmem.baselines.memorybank.units import merge_neighbours, pair_turns, settings_deviations
from scgmem.api import Conversation, MemoryMethod, Recall, dia_order
from scgmem.api.settings import check_choice, check_embedder, check_int

log = logging.getLogger(__name__)

PROMPT_VERSION = 1
FORGETTING_MODES = ("stochastic", "soft", "off")

class MemoryBank(MemoryMethod):
    """MemoryBank over one LoCoMo conversation.

    Args:
        llm: the shared LLM (or `ScriptedLLM`).
        embedder: the shared embedder (all-MiniLM-L6-v2, MemoryBank's English default [M1]).
        k: units retrieved per question (10: the port [M2] and A-MEM; the originals use 2/3/6).
        forgetting: "stochastic" (faithful, default), "soft" or "off"; see the module docstring.
        forgetting_curve: "code" or "paper", the authors' two curves (memorybank_forgetting.py).
        simulate_recall: strengthen the units each incoming turn retrieves (SiliconFriend
            searches memory for every user utterance).
        recall_strengthen_k: hits per simulated recall (3: local_doc_qa VECTOR_SEARCH_TOP_K [M1]).
        total_days: `paper` curve: age at which a unit is deleted (30: `total_date` [M1]).
        max_level: `paper` curve: highest memory level (2: `memory_level=3` levels 0..2 [M1]).
        merge_chars: same-date neighbours merged into a hit up to this many characters
            (200: CHUNK_SIZE [M1]); 0 turns merging off.
        summary_max_new_tokens: cap on every summary (400: the original max_tokens [M1]).
        summary_ids: "none" (summaries contribute no dia_ids, the default) or "session" (a retrieved
            summary contributes its whole session).
    """

    name = "memorybank"

    def __init__(self, llm, embedder, *, k: int = 10, forgetting: str = "stochastic",
                 forgetting_curve: str = "code", simulate_recall: bool = True, recall_strengthen_k: int = 3,
                 total_days: int = 30, max_level: int = 2, merge_chars: int = 200, summary_max_new_tokens: int = 400,
                 summary_ids: str = "none") -> None:
        super().__init__(llm, embedder)
        check_embedder("memorybank", embedder, "dense retrieval")
        for arg, value in (("k", k), ("recall_strengthen_k", recall_strengthen_k), ("total_days", total_days),
                           ("summary_max_new_tokens", summary_max_new_tokens)):
            check_int(arg, value)
        check_int("max_level", max_level, 0)
        check_int("merge_chars", merge_chars, 0)
        check_choice("forgetting", forgetting, FORGETTING_MODES)
        check_choice("summary_ids", summary_ids, ("none", "session"))
        self.k = k
        self.forgetting = forgetting
        self.curve = ForgettingCurve(forgetting_curve, total_days, max_level)
        self.simulate_recall = simulate_recall
        self.recall_strengthen_k = recall_strengthen_k
        self.total_days = total_days
        self.max_level = max_level
        self.merge_chars = merge_chars
        self.summary_max_new_tokens = summary_max_new_tokens
        self.summary_ids = summary_ids
        # Built memory (see state_dict).
        self.speakers: tuple[str, str] = ("", "")
        self.units: list[dict[str, Any]] = []
        self.sessions: list[dict[str, Any]] = []  # per session: index, date, day, dia_ids, summary, personality
        self.overall_summary = ""
        self.overall_personality = ""
        self.qa_day = 0
        self._vectors: np.ndarray | None = None  # (n_units, d) unit embeddings

    # ------------------------------------------------------------------ settings and state
    def memory_settings(self) -> dict[str, Any]:
        # The ingest rng's seed also changes the memory in "stochastic" mode; the harness keys
        # the cache on it (settings cannot see it).
        return {"forgetting": self.forgetting, "forgetting_curve": self.curve.curve,
                "simulate_recall": self.simulate_recall,
                "recall_strengthen_k": self.recall_strengthen_k, "total_days": self.total_days,
                "max_level": self.max_level, "summary_max_new_tokens": self.summary_max_new_tokens,
                "embedder": getattr(self.embedder, "name", None), "prompt_version": PROMPT_VERSION}

    def state_dict(self) -> dict[str, Any]:
        return {"speakers": list(self.speakers), "units": self.units, "sessions": self.sessions,
                "overall_summary": self.overall_summary, "overall_personality": self.overall_personality,
                "qa_day": self.qa_day, "counters": dict(self.counters), "deviations": dict(self.deviations)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the built memory; unit embeddings are recomputed with the embedder."""
        self.speakers = tuple(state["speakers"])
        self.units = [dict(u) for u in state["units"]]
        self.sessions = [dict(s) for s in state["sessions"]]
        self.overall_summary = state["overall_summary"]
        self.overall_personality = state["overall_personality"]
        self.qa_day = int(state["qa_day"])
        self.counters = Counter({k: int(v) for k, v in state["counters"].items()})
        self.deviations.clear()
        self.deviations.update({k: int(v) for k, v in state["deviations"].items()})
        self._vectors = self.embedder.encode([u["text"] for u in self.units])

    def export(self) -> dict[str, Any]:
        return {"overall_summary": self.overall_summary, "overall_personality": self.overall_personality,
                "qa_day": self.qa_day, "sessions": self.sessions, "units": self.units}

    def stats(self) -> dict[str, Any]:
        alive = [u for u in self.units if u["alive"]]
        per_session: dict[int, list[int]] = {}  # session -> [turn units alive, turn units]
        for u in self.units:
            if u["kind"] != "summary":
                counts = per_session.setdefault(u["session"], [0, 0])
                counts[0] += u["alive"]
                counts[1] += 1
        return {"deviations": dict(self.deviations), "forgetting": self.forgetting,
                "forgetting_curve": self.curve.curve,
                "settings_deviations": settings_deviations(self.forgetting, self.simulate_recall),
                "units": len(self.units), "units_alive": len(alive),
                "summaries": sum(u["kind"] == "summary" for u in self.units),
                "summaries_alive": sum(u["kind"] == "summary" for u in alive),
                "sessions": len(self.sessions),
                # sessions with any turn unit alive, and the alive turn units in session equivalents
                "sessions_alive": sum(a > 0 for a, _ in per_session.values()),
                "sessions_alive_equivalent": round(sum(a / n for a, n in per_session.values()), 3),
                **self.counters}

    # ------------------------------------------------------------------ ingest
    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        """Build units and summaries, then replay the sessions' dates: forget, recall, insert."""
        self.speakers = (conversation.speaker_a, conversation.speaker_b)
        self.sessions = self._session_records(conversation)
        self._summarize_sessions(conversation)
        self._summarize_overall()
        self.units = self._build_units(conversation)
        self._vectors = self.embedder.encode([u["text"] for u in self.units])
        turn_vectors = (self.embedder.encode([render_turn_line(t) for t in conversation.turns])
                        if self.simulate_recall else None)
        self._replay(conversation, rng, turn_vectors)
        log.info("memorybank %s (forgetting=%s): %d units, %d alive at QA from %d of %d sessions; "
                 "%d summaries dropped", conversation.sample_id, self.forgetting, len(self.units),
                 sum(u["alive"] for u in self.units), self.stats()["sessions_alive"], len(self.sessions),
                 self.deviations["empty_summary_dropped"])

    def _session_records(self, conversation: Conversation) -> list[dict[str, Any]]:
        records, previous = [], None
        for session in conversation.sessions:
            parsed = parse_locomo_date(session.date_time)
            if parsed is None:
                self.deviations["unparsed_date"] += 1
                day = (previous + 1) if previous is not None else 0
            else:
                day = parsed.date().toordinal()
            previous = day
            records.append({"index": session.index, "date": session.date_time, "day": day,
                            "dia_ids": [t.dia_id for t in session.turns], "summary": "", "personality": ""})
        return records

    def _render(self, user: str) -> str:
        a, b = self.speakers
        return self.llm.render([{"role": "system", "content": SYSTEM_PROMPT.format(a=a, b=b)},
                                {"role": "user", "content": user}])

    def _clean(self, text: str) -> str:
        cleaned, dropped = strip_repeated_lines(text)
        if dropped:
            self.deviations["summary_repeated_lines"] += 1
        if not cleaned:
            self.deviations["empty_summary_dropped"] += 1
        return cleaned

    def _summarize_sessions(self, conversation: Conversation) -> None:
        """Event summary and personality note of every session: 2 x sessions prompts, one call."""
        a, b = self.speakers
        prompts = []
        for session in conversation.sessions:
            dialogue = "\n".join(render_turn_line(t) for t in session.turns)
            prompts.append(self._render(EVENT_PROMPT.format(dialogue=dialogue)))
            prompts.append(self._render(PERSONALITY_PROMPT.format(a=a, b=b, dialogue=dialogue)))
        replies = greedy_texts(self.llm, prompts, self.summary_max_new_tokens)
        self.count("summary_calls", len(prompts))
        for record, event, personality in zip(self.sessions, replies[0::2], replies[1::2]):
            record["summary"] = self._clean(event)
            record["personality"] = self._clean(personality)

    def _fit_entries(self, template: str, entry: str, field: str) -> str:
        """The global prompt over all non-empty session entries, oldest dropped until it fits."""
        a, b = self.speakers
        entries = [entry.format(date=s["date"], text=s[field]) for s in self.sessions if s[field]]
        limit = self.llm.context_window - self.summary_max_new_tokens
        while True:
            prompt = self._render(template.format(a=a, b=b, entries="\n".join(entries)))
            if len(entries) <= 1 or self.llm.count_tokens(prompt) <= limit:
                return prompt
            entries.pop(0)
            self.deviations["global_prompt_truncated"] += 1

    def _summarize_overall(self) -> None:
        """Global summary of the daily summaries and global portrait of the notes: one call of 2."""
        prompts = [self._fit_entries(OVERALL_EVENT_PROMPT, OVERALL_EVENT_ENTRY, "summary"),
                   self._fit_entries(OVERALL_PERSONALITY_PROMPT, OVERALL_PERSONALITY_ENTRY, "personality")]
        event, personality = greedy_texts(self.llm, prompts, self.summary_max_new_tokens)
        self.count("summary_calls", 2)
        self.overall_summary = self._clean(event)
        self.overall_personality = self._clean(personality)

    def _build_units(self, conversation: Conversation) -> list[dict[str, Any]]:
        units: list[dict[str, Any]] = []
        for session, record in zip(conversation.sessions, self.sessions):
            for group in pair_turns(session):
                text = f"Conversation content on {record['date']}: " + "; ".join(render_turn_line(t) for t in group)
                units.append(self._unit(units, "pair" if len(group) == 2 else "single", record, text,
                                        [t.dia_id for t in group]))
            if record["summary"]:
                text = f"The summary of the conversation on {record['date']} is: {record['summary']}"
                units.append(self._unit(units, "summary", record, text, []))
        return units

    @staticmethod
    def _unit(units: list, kind: str, record: dict, text: str, dia_ids: list[str]) -> dict[str, Any]:
        return {"id": len(units), "kind": kind, "session": record["index"], "date": record["date"],
                "day": record["day"], "dia_ids": dia_ids, "text": text, "level": 0,
                "anchor": record["day"], "alive": False, "inserted": False, "forgotten_day": None}

    def _replay(self, conversation: Conversation, rng, turn_vectors: np.ndarray | None) -> None:
        """Walk the sessions in date order: forgetting pass, simulated recalls, then insertion."""
        clock = None
        turn_offset = 0
        for session, record in zip(conversation.sessions, self.sessions):
            day = record["day"]
            if clock is None or day > clock:  # the clock advances: SiliconFriend's login-time pass
                if self.forgetting == "stochastic":
                    self.count("forgotten", self.curve.forgetting_pass(self.units, day, rng))
                clock = day
            now = max(day, clock)
            if turn_vectors is not None:
                self._simulated_recall(turn_vectors[turn_offset:turn_offset + len(session.turns)], now)
            turn_offset += len(session.turns)
            for u in self.units:
                if u["session"] == record["index"]:
                    u["alive"] = u["inserted"] = True
                    u["anchor"] = now
        self.qa_day = clock if clock is not None else 0

    def _simulated_recall(self, queries: np.ndarray, day: int) -> None:
        """Every incoming turn retrieves its top-`recall_strengthen_k` alive units and strengthens them."""
        alive = np.array([u["alive"] for u in self.units], dtype=bool)
        if not alive.any() or len(queries) == 0:
            return
        scores = queries @ self._vectors.T  # (turns, units)
        scores[:, ~alive] = -np.inf
        k = min(self.recall_strengthen_k, int(alive.sum()))
        for row in scores:
            order = np.lexsort((np.arange(len(row)), -row))[:k]  # best first, ties by id
            for i in order:
                self._strengthen(self.units[int(i)], day)

    def _strengthen(self, unit: dict, day: int) -> None:
        """`update_memory_when_searched` [M1]: one more recall, anchor reset to today."""
        if self.curve.strengthen(unit, day):
            self.count("strengthened")

    # ------------------------------------------------------------------ recall
    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        """One embedding call for all questions; no LLM call."""
        q_vectors = self.embedder.encode(list(questions))
        self.count("questions", len(questions))
        return [self._recall_one(v, b) for v, b in zip(q_vectors, budget_tokens)]

    def scores(self, q_vector: np.ndarray) -> np.ndarray:
        """Ranking score of every unit for a query: cos (x R at QA time in soft mode); -inf if gone."""
        scores = (self._vectors @ q_vector).astype(np.float64)  # (units,)
        if self.forgetting == "soft":
            scores *= np.array([self.curve.retention(self.qa_day - u["anchor"], u["level"]) for u in self.units])
        scores[[not u["alive"] for u in self.units]] = -np.inf
        return scores

    def _hits(self, q_vector: np.ndarray) -> list[list[int]]:
        """Top-k alive units, each with its merged same-date neighbours: groups of unit ids, best first."""
        scores = self.scores(q_vector)
        n_alive = int(np.isfinite(scores).sum())
        order = np.lexsort((np.arange(len(scores)), -scores))[:min(self.k, n_alive)]
        alive_ids = [u["id"] for u in self.units if u["alive"]]
        position = {uid: i for i, uid in enumerate(alive_ids)}
        taken: set[int] = set()
        groups = []
        for uid in map(int, order):
            if uid in taken:
                continue
            group = [uid]
            taken.add(uid)
            if self.merge_chars:
                group += merge_neighbours(self.units, uid, alive_ids, position, taken, self.merge_chars)
            groups.append(group)
        return groups

    def _context(self, groups: list[list[int]], with_portrait: bool, with_summary: bool) -> str:
        parts = []
        if with_summary and self.overall_summary:
            parts.append(f"Overall summary of the past conversations: {self.overall_summary}")
        if with_portrait and self.overall_personality:
            a, b = self.speakers
            parts.append(f"Portrait of {a} and {b}: {self.overall_personality}")
        chosen = sorted((uid for g in groups for uid in g), key=lambda uid: (self.units[uid]["day"], uid))
        if chosen:
            dates = list(dict.fromkeys(self.units[uid]["date"] for uid in chosen))
            parts.append(f"Relevant memories (dates: {'; '.join(dates)}):")
            parts.extend(self.units[uid]["text"] for uid in chosen)
        return "\n".join(parts)

    def _recall_one(self, q_vector: np.ndarray, budget_tokens: int) -> Recall:
        """Context = global summary + portrait + retrieved units by date; trimmed to the budget.

        Over budget: the lowest-ranked hits go first, then the portrait, then the summary.
        """
        groups = self._hits(q_vector)
        portrait = summary = True
        context = self._context(groups, portrait, summary)
        while context and self.llm.count_tokens(context) > budget_tokens:
            if groups:
                groups.pop()
            elif portrait:
                portrait = False
            else:
                summary = False
            context = self._context(groups, portrait, summary)
        ids: set[str] = set()
        for uid in (uid for g in groups for uid in g):
            unit = self.units[uid]
            if unit["kind"] != "summary":
                ids.update(unit["dia_ids"])
            elif self.summary_ids == "session":
                ids.update(next(s["dia_ids"] for s in self.sessions if s["index"] == unit["session"]))
        return Recall(context, sorted(ids, key=dia_order), {})
