"""A-MEM (Xu et al., 2025): agentic memory notes, LLM linking and neighbour evolution.

docs/methods.md, section A-MEM; the authors' LoCoMo code [A1]: `memory_layer.py` (original, JSON
schemas) and `memory_layer_robust.py` + `llm_text_parsers.py` (their plain-text version,
which we follow, trying JSON first). Per turn:

1. **Note.** Content ``Speaker {speaker}says : {text}`` (sic), image turns prefixed
   ``[Image: {caption}] ``; timestamp = the session date.
2. **Analyze** (one call): keywords, context, tags. Empty keywords -> one focused
   5-keyword retry -> heuristics (counted as deviations).
3. **Evolve** (1-3 sequential calls): neighbours = top-`neighbours` documents by cosine
   against the note content, taken before insertion; a decision call, then a strengthen call
   (links += connections, tags replaced) and/or an update call (neighbour i's context/tags
   overwritten, in order). A parse failure means no evolution; link indices are
   bounds-checked (the original would crash).
4. **Index.** Document ``content:{c} context:{x} keywords: {..} tags: {..}`` embedded at
   insert; neighbour edits are not re-embedded; every `evo_threshold` evolutions all
   documents are rebuilt as ``{c} , {x} {keywords} {tags}`` and re-embedded.

Query: one call turns the question into keywords (the question itself if that fails);
cosine top-k (k=10) over the documents; each hit is followed by its linked notes (at most
k+1 per hit), rendered as in `find_related_memories_raw`. Like that function, a note reached
twice is rendered twice (`link_expansion="repeat"`); `"unique"` renders each note once.

Batching: the analyze calls of one session (and their retries) go into one `generate`
call -- analysis reads only the note's own content, so this is exact. Evolution is
note by note (each decision sees the notes and edits before it), so it is not batched.
The query calls of `recall_batch` are batched.

Differences from the authors' robust code, each listed in `stats()["settings_deviations"]`
(and so in summary.json): its parser repairs empty keywords with the heuristics *before* its
retry check, so its focused retry never fires; we run the retry first, so that it can fire.
Decoding is greedy by default (docs/methods.md, "Decoding": every method's memory calls are
greedy, so methods differ by their memory and not by sampling noise);
`decoding="authors"` samples at T=0.7 (0.3 for the retry) as the authors do, one seed per
prompt. The generation caps are far below the authors' max_tokens=1000.
"""
from __future__ import annotations

import logging
import zlib
from collections import Counter
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from scgmem.baselines.amem import prompts as P
from scgmem.api import Conversation, MemoryMethod, Recall, Turn, truncate_to_tokens
from scgmem.api.settings import check_choice, check_embedder, check_int
from scgmem.llm.embedder import cosine_top_k

log = logging.getLogger(__name__)

PROMPT_VERSION = "amem-robust-1"  # bump when a prompt changes: it is part of the cache key
AUTHORS_MAX_TOKENS = 1000  # memory_layer_robust.py get_completion(max_tokens=1000) [A1]
# memory_layer_robust.py: get_completion(temperature=0.7) by default, the focused retry at 0.3 [A1]
AUTHORS_TEMPERATURE = {"retry": 0.3}
AUTHORS_DEFAULT_TEMPERATURE = 0.7


def note_content(turn: Turn) -> str:
    """test_advanced.py's note text (its missing space kept); load_dataset.py's image prefix."""
    image = f"[Image: {turn.caption}] " if turn.caption else ""
    return "Speaker " + turn.speaker + "says : " + image + turn.text


class AMem(MemoryMethod):
    """A-MEM on one conversation.

    Args:
        llm, embedder: the shared LLM and embedder (the embedder is required).
        k: retrieval size at query time (the paper's main setting; the authors sweep 10-50).
        neighbours: neighbours shown to the evolution calls (memory_layer.py: k=5).
        evo_threshold: evolutions between two rebuilds of all documents (memory_layer.py: 100).
        analyze_tokens / retry_tokens / decision_tokens / strengthen_tokens / update_tokens /
        query_tokens: generation caps per call (the authors allow 1000; a 135M model only
            rambles past these).
        batch_analysis: batch a session's analyze calls (exact; see the module docstring).
        link_expansion: "repeat" (as the authors: a note reached twice is rendered twice) or
            "unique" (each note once).
        decoding: "greedy" (the baselines' rule) or "authors" (T=0.7, retry 0.3, seeded per prompt).
    """

    name = "amem"
    resumable = True  # checkpoints after every session (hours of ingest on a CPU)

    def __init__(self, llm, embedder, k: int = 10, neighbours: int = 5, evo_threshold: int = 100,
                 analyze_tokens: int = 96, retry_tokens: int = 32, decision_tokens: int = 32,
                 strengthen_tokens: int = 64, update_tokens: int = 256, query_tokens: int = 32,
                 batch_analysis: bool = True, link_expansion: str = "repeat", decoding: str = "greedy") -> None:
        super().__init__(llm, embedder)
        check_embedder("amem", embedder, "its notes are retrieved by embedding")
        for arg, value in (("k", k), ("neighbours", neighbours), ("evo_threshold", evo_threshold)):
            check_int(arg, value)
        check_choice("link_expansion", link_expansion, ("repeat", "unique"))
        check_choice("decoding", decoding, ("greedy", "authors"))
        self.k, self.neighbours, self.evo_threshold = k, neighbours, evo_threshold
        self.link_expansion, self.decoding = link_expansion, decoding
        self.seed_base = 0  # drawn from the ingest rng when sampling; stored with the state
        self.tokens = {"analyze": analyze_tokens, "retry": retry_tokens, "decision": decision_tokens,
                       "strengthen": strengthen_tokens, "update": update_tokens, "query": query_tokens}
        self.batch_analysis = batch_analysis
        self.notes: list[dict[str, Any]] = []  # memory index = position in this list
        self.documents: list[str] = []  # retriever text of each note
        self.matrix = np.zeros((0, 0), dtype=np.float32)  # (n_notes, d) document embeddings
        self.evo_cnt = 0

    # ------------------------------------------------------------------ LLM helpers
    def _prompt(self, text: str) -> str:
        return self.llm.render([{"role": "system", "content": P.SYSTEM_MESSAGE},
                                {"role": "user", "content": text}])

    def _complete(self, texts: list[str], kind: str, seeds: list[int] | None = None) -> list[str]:
        """Completions for several prompts in one generate call: greedy, or sampled as the authors.

        A sampled prompt's seed is `seeds[i]` or, by default, derived from the prompt text and
        `seed_base`, so a resumed ingest draws the same samples.
        """
        if not texts:
            return []
        prompts = [self._prompt(t) for t in texts]
        if self.decoding == "greedy":
            outs = self.llm.generate(prompts, max_new_tokens=self.tokens[kind], temperature=0.0)
        else:
            if seeds is None:
                seeds = [(self.seed_base * 1_000_003 + zlib.crc32(p.encode())) % 2**31 for p in prompts]
            outs = self.llm.generate(prompts, max_new_tokens=self.tokens[kind], seeds=seeds,
                                     temperature=AUTHORS_TEMPERATURE.get(kind, AUTHORS_DEFAULT_TEMPERATURE))
        return [o[0].text for o in outs]

    def _embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)

    # ------------------------------------------------------------------ analyze
    def analyze(self, contents: list[str]) -> list[dict[str, Any]]:
        """Keywords/context/tags for each content (batched), with retry and heuristics."""
        if self.batch_analysis:
            replies = self._complete([P.ANALYZE_PROMPT.format(content=c) for c in contents], "analyze")
        else:
            replies = [self._complete([P.ANALYZE_PROMPT.format(content=c)], "analyze")[0] for c in contents]
        results = []
        for reply in replies:
            result, how = P.parse_analysis(reply)
            self.counters[f"analyze_{how}"] += 1
            results.append(result)
        empty = [i for i, r in enumerate(results) if not r["keywords"]]
        retries = self._complete([P.FOCUSED_KEYWORDS_PROMPT.format(content=contents[i]) for i in empty], "retry")
        for i, reply in zip(empty, retries):
            self.counters["analyze_retries"] += 1
            results[i]["keywords"] = P.parse_list_items(reply)
        for content, r in zip(contents, results):
            if not r["keywords"]:
                r["keywords"] = P.heuristic_keywords(content)
                self.deviations["analyze_heuristic_keywords"] += 1
            if not r["context"]:
                r["context"] = P.heuristic_context(content)
                self.deviations["analyze_heuristic_context"] += 1
            if not r["tags"]:
                r["tags"] = r["keywords"][:3]
                self.deviations["analyze_heuristic_tags"] += 1
        return results

    # ------------------------------------------------------------------ evolution
    def _neighbour_listing(self, indices: list[int]) -> str:
        """memory_layer.py::find_related_memories: the `memory index:` lines the LLM sees."""
        lines = []
        for i in indices:
            n = self.notes[i]
            lines.append(f"memory index:{i}\t talk start time:{n['timestamp']}\t memory content: {n['content']}"
                         f"\t memory context: {n['context']}\t memory keywords: {n['keywords']}"
                         f"\t memory tags: {n['tags']}\n")
        return "".join(lines)

    def evolve(self, note: dict[str, Any], query_vector: np.ndarray) -> bool:
        """Decision, then strengthen and/or update calls; returns whether the note evolved."""
        indices = cosine_top_k(query_vector, self.matrix, self.neighbours) if self.notes else []
        if not indices:
            return False
        listing = self._neighbour_listing(indices)
        [reply] = self._complete([P.DECISION_PROMPT.format(
            context=note["context"], content=note["content"], keywords=note["keywords"],
            neighbours=listing)], "decision")
        decision, how = P.parse_decision(reply)
        self.counters[f"decision_{how}"] += 1
        self.counters[f"decision_{decision.lower()}"] += 1
        if decision == "NO_EVOLUTION":
            return False
        if decision in ("STRENGTHEN", "STRENGTHEN_AND_UPDATE"):
            [reply] = self._complete([P.STRENGTHEN_PROMPT.format(
                content=note["content"], keywords=note["keywords"], neighbours=listing)], "strengthen")
            connections, tags, how = P.parse_strengthen(reply)
            self.counters[f"strengthen_{how}"] += 1
            # Connections are memory indices as listed ("memory index:i"); the original
            # stores them unchecked and crashes at query time on a bad one.
            valid = [c for c in connections if 0 <= c < len(self.notes)]
            self.counters["links_out_of_range"] += len(connections) - len(valid)
            note["links"].extend(valid)
            if tags:
                note["tags"] = tags
        if decision in ("UPDATE_NEIGHBOR", "STRENGTHEN_AND_UPDATE"):
            [reply] = self._complete([P.UPDATE_PROMPT.format(
                content=note["content"], context=note["context"], neighbours=listing,
                max_index=len(indices) - 1, count=len(indices))], "update")
            updates, how = P.parse_neighbour_updates(reply, len(indices))
            self.counters[f"update_{how}"] += 1
            for i, upd in zip(indices, updates):  # in order; edits are not re-embedded
                if upd["tags"]:
                    self.notes[i]["tags"] = upd["tags"]
                if upd["context"]:
                    self.notes[i]["context"] = upd["context"]
        return True

    # ------------------------------------------------------------------ index
    @staticmethod
    def insert_document(note: dict[str, Any]) -> str:
        return ("content:" + note["content"] + " context:" + note["context"] + " keywords: "
                + ", ".join(note["keywords"]) + " tags: " + ", ".join(note["tags"]))

    @staticmethod
    def rebuilt_document(note: dict[str, Any]) -> str:
        return f"{note['content']} , {note['context']} {' '.join(note['keywords'])} {' '.join(note['tags'])}"

    def consolidate(self) -> None:
        """memory_layer.py::consolidate_memories: rebuild and re-embed every document."""
        self.documents = [self.rebuilt_document(n) for n in self.notes]
        self.matrix = self._embed(self.documents)
        self.counters["consolidations"] += 1

    def add_note(self, turn: Turn, analysis: dict[str, Any], query_vector: np.ndarray) -> None:
        note = {"content": note_content(turn), "timestamp": turn.date_time, "dia_id": turn.dia_id,
                "keywords": analysis["keywords"], "context": analysis["context"], "tags": analysis["tags"],
                "links": []}
        evolved = self.evolve(note, query_vector)
        self.notes.append(note)
        self.documents.append(self.insert_document(note))
        vector = self._embed([self.documents[-1]])  # (1, d)
        self.matrix = vector if self.matrix.size == 0 else np.vstack([self.matrix, vector])
        if evolved:
            self.evo_cnt += 1
            if self.evo_cnt % self.evo_threshold == 0:
                self.consolidate()

    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        if self.decoding == "authors" and self.resume_after_session == 0:  # a resume keeps the stored one
            self.seed_base = int(rng.integers(2**31))
        bar = tqdm(self.sessions_to_ingest(conversation), desc=f"A-MEM {conversation.sample_id}", unit="session",
                   leave=False, mininterval=5)
        for session in bar:
            turns = list(session.turns)
            if not turns:
                continue
            contents = [note_content(t) for t in turns]
            analyses = self.analyze(contents)
            query_vectors = self._embed(contents)  # (n_turns, d): neighbour queries, state-independent
            for turn, analysis, vector in zip(turns, analyses, query_vectors):
                self.add_note(turn, analysis, vector)
            log.info("A-MEM %s session %d: %d notes, %d evolutions, %d links", conversation.sample_id,
                     session.index, len(self.notes), self.evo_cnt, sum(len(n["links"]) for n in self.notes))
            self.session_done(session.index)

    # ------------------------------------------------------------------ query
    def query_keywords(self, questions: list[str], seeds: list[int] | None = None) -> list[str]:
        replies = self._complete([P.QUERY_PROMPT.format(question=q) for q in questions], "query", seeds)
        out = []
        for q, reply in zip(questions, replies):
            keywords = P.parse_query_keywords(reply)
            if not keywords:
                self.deviations["query_keywords_fallback"] += 1
                keywords = q
            out.append(keywords)
        return out

    @staticmethod
    def render_note(note: dict[str, Any]) -> str:
        """find_related_memories_raw's entry format (its missing separators kept)."""
        return (f"talk start time:{note['timestamp']}memory content: {note['content']}"
                f"memory context: {note['context']}memory keywords: {note['keywords']}"
                f"memory tags: {note['tags']}\n")

    def expand(self, hits: list[int]) -> list[int]:
        """Hits in rank order, each followed by its linked notes (<= k+1 per hit).

        `repeat`: as `find_related_memories_raw`, a note is listed each time it is reached;
        `unique`: only the first time.
        """
        chosen: list[int] = []
        repeat = self.link_expansion == "repeat"
        for i in hits:
            if repeat or i not in chosen:
                chosen.append(i)
            for j, linked in enumerate(self.notes[i]["links"]):
                if 0 <= linked < len(self.notes) and (repeat or linked not in chosen):
                    chosen.append(linked)
                if j >= self.k:
                    break
        return chosen

    def _recall_from(self, keywords: str, budget_tokens: int) -> Recall:
        if not self.notes:
            return Recall("", [], {})
        hits = cosine_top_k(self._embed([keywords])[0], self.matrix, self.k)
        parts, ids, used = [], [], 0
        for i in self.expand(hits):
            text = self.render_note(self.notes[i])
            cost = self.llm.count_tokens(text)
            if used + cost > budget_tokens:
                self.counters["notes_dropped_for_budget"] += 1
                if not parts:  # not even the best hit fits: keep its head
                    text = truncate_to_tokens(self.llm, text, budget_tokens)
                    if text:
                        parts.append(text)
                        ids.append(self.notes[i]["dia_id"])
                break
            parts.append(text)
            ids.append(self.notes[i]["dia_id"])
            used += cost
        context = "".join(parts)
        while parts and self.llm.count_tokens(context) > budget_tokens:  # joins can merge tokens
            parts.pop()
            ids.pop()
            context = "".join(parts)
        return Recall(context, list(dict.fromkeys(ids)), {})

    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        seeds = ([int(r.integers(2**31)) for r in rngs] if self.decoding == "authors" and all(rngs)
                 else None)  # the harness's per-question rngs; without them, seeds from the prompts
        keywords = self.query_keywords(list(questions), seeds)
        return [self._recall_from(kw, b) for kw, b in zip(keywords, budget_tokens)]

    # ------------------------------------------------------------------ caching and reporting
    def memory_settings(self) -> dict[str, Any]:
        return {"method": self.name, "prompt_version": PROMPT_VERSION, "neighbours": self.neighbours,
                "evo_threshold": self.evo_threshold, "batch_analysis": self.batch_analysis,
                "decoding": self.decoding,
                "tokens": {k: v for k, v in self.tokens.items() if k != "query"},
                "embedder": getattr(self.embedder, "name", type(self.embedder).__name__)}

    def state_dict(self) -> dict[str, Any]:
        return {"notes": self.notes, "documents": self.documents, "evo_cnt": self.evo_cnt, "seed_base": self.seed_base,
                "counters": dict(self.counters), "deviations": dict(self.deviations)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.notes = [dict(n, links=list(n["links"])) for n in state["notes"]]
        self.documents = list(state["documents"])
        if len(self.documents) != len(self.notes):
            raise ValueError(f"A-MEM state: {len(self.notes)} notes but {len(self.documents)} documents")
        self.evo_cnt = int(state["evo_cnt"])
        self.seed_base = int(state.get("seed_base", 0))
        self.counters = Counter(state.get("counters", {}))
        self.deviations = Counter(state.get("deviations", {}))
        # Embeddings are recomputed from the stored document texts (never pickled).
        self.matrix = self._embed(self.documents) if self.documents else np.zeros((0, 0), dtype=np.float32)

    def export(self) -> dict[str, Any]:
        return {"n_notes": len(self.notes), "evolutions": self.evo_cnt, "notes": self.notes}

    def stats(self) -> dict[str, Any]:
        return {"deviations": dict(self.deviations), "parse": dict(self.counters),
                "notes": len(self.notes), "evolutions": self.evo_cnt,
                "links": sum(len(n["links"]) for n in self.notes),
                "decoding": self.decoding, "link_expansion": self.link_expansion,
                "settings_deviations": self.settings_deviations()}

    def settings_deviations(self) -> dict[str, str]:
        """Where this run's settings differ from the authors' code [A1], in words."""
        out = {"focused_retry": "runs before the heuristics (the authors' parser fills empty keywords "
                                "with heuristics first, so their retry never fires)"}
        if self.decoding == "greedy":
            out["decoding"] = "greedy (authors: T=0.7, focused retry T=0.3)"
        capped = {kind: n for kind, n in self.tokens.items() if n < AUTHORS_MAX_TOKENS}
        if capped:
            out["generation_caps"] = f"{capped} new tokens (authors: max_tokens={AUTHORS_MAX_TOKENS})"
        if self.link_expansion == "unique":
            out["link_expansion"] = "each note rendered once (authors: once per hit or link that reaches it)"
        return out
