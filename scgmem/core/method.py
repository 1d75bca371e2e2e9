"""SCG-Mem behind the harness interface (paper Sections 3.1-3.6; the ablations of Table 2).

`SCGMem` wires the parts together: per conversation, `ingest` runs schema evolution
(`evolution.Evolution`, Section 3.4) over the turns in batches, and indexes each turn's
concepts (concept -> dia_ids, the associative graph of Section 3.5); `recall_batch`
activates seeds for several questions in one constrained beam search (Section 3.6), then
propagates and reconstructs each question's context with its own random generator.

Example::

    method = SCGMem(llm, embedder, k=35, hops=1)
    method.ingest(conversation, np.random.default_rng(0))
    r = method.recall("When did Caroline go to the support group?", budget_tokens=2000,
                      rng=np.random.default_rng(1))
    r.extras["seed_keys"], r.dia_ids
"""
from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from typing import Any

import numpy as np

from scgmem.api import Conversation, MemoryMethod, Recall, Turn, render_turn
from scgmem.api.settings import check_bool, check_int, check_positive, check_slot, setting_error
from scgmem.core.concepts import normalise
from scgmem.core.evolution import ANSWER_PREFIX, CONCEPT_PROMPT, Evolution
from scgmem.core.graph import AssociativeGraph
from scgmem.core.recall import (FREE_RECALL_PREFIX, FREE_RECALL_PROMPT, RECALL_PREFIX, RECALL_PROMPT,
                                constrained_seeds, free_seeds, propagate, rank_turns, reconstruct_context)
from scgmem.core.schema import CognitiveSchema
from scgmem.llm.protocol import LanguageModel, Needs, unmet

log = logging.getLogger(__name__)

STATE_FORMAT = 1  # bump when the layout of state_dict changes
# Bump when ingestion code changes what it builds (parsing, normalisation, stop words,
# grounding, the trigger rule, decoding): the memory cache is keyed on memory_settings().
INGEST_VERSION = 2


def _finite_or_none(x: float) -> float | None:
    return round(x, 4) if math.isfinite(x) else None


class SCGMem(MemoryMethod):
    """Schema-constrained generative memory.

    Args:
        llm / embedder: shared components (the embedder is needed by `constraint=False` only).
        k: active concepts per question, seeds included (paper optimum 35, Figure 3).
        hops: propagation steps (paper optimum 1, Figure 4; 0 = seeds only).
        num_beams: b, seeds per question from the constrained beam search (Eq. 11).
        temperature: T of softmax(w_uv / T) (Eq. 12).
        constraint: False = ablation "w/o Cognitive Constraint" (recall only; the built
            memory is the same).
        evolution: False = ablation "w/o Evolutionary Update" (accommodation only).
        keep_threshold / trigger_threshold / min_assimilated / max_keys / max_free_keys /
            max_concept_words / free_max_new_tokens: see `evolution.Evolution`.
        ingest_batch_size: turns per evolution batch (one assimilation call, then one
            accommodation call); a turn cannot assimilate into concepts created within its
            own batch.
        ingest_prompt / ingest_prefix: the concept instruction after each turn, and the
            assistant's primer.
        recall_prompt / recall_prefix: the seed instruction ({question}) and primer.
        free_recall_prompt / free_recall_prefix / max_keywords: the constraint=False keywords.
        turns_per_concept: turns each active concept adds to the context (Section 3.6's
            "text segments"), or "all" (every turn of every active concept, up to the window).
        threshold_mode / keep_quantile / trigger_quantile / threshold_warmup: how the
            assimilation thresholds are set (`evolution.Evolution`): "quantile" = relative to
            the model's own log-probs on the conversation so far; "absolute" = the fixed
            keep_threshold / trigger_threshold.
        context_tokens: optional cap on the context below the runner's budget (speed).
        separator: the text between keys (one token; the keys' terminator).
    """

    name = "scgmem"
    needs = Needs(constraints=True, by="method=scgmem")  # Eq. 6's trie-constrained decoding, raw log-probs

    def __init__(self, llm: LanguageModel, embedder=None, *, k: int = 35, hops: int = 1, num_beams: int = 5,
                 temperature: float = 1.0, constraint: bool = True, evolution: bool = True,
                 threshold_mode: str = "quantile", keep_quantile: float = 0.5, trigger_quantile: float = 0.3,
                 threshold_warmup: int = 16, turns_per_concept: int | str = 1,
                 keep_threshold: float = -2.5, trigger_threshold: float = -3.0, min_assimilated: int = 1,
                 max_keys: int = 5, max_free_keys: int = 8, max_concept_words: int = 4,
                 free_max_new_tokens: int = 24, ingest_batch_size: int = 8,
                 ingest_prompt: str = CONCEPT_PROMPT, ingest_prefix: str = ANSWER_PREFIX,
                 recall_prompt: str = RECALL_PROMPT, recall_prefix: str = RECALL_PREFIX,
                 free_recall_prompt: str = FREE_RECALL_PROMPT, free_recall_prefix: str = FREE_RECALL_PREFIX,
                 max_keywords: int = 5, context_tokens: int | None = None, separator: str = ",") -> None:
        super().__init__(llm, embedder)
        for name, value, low in (("k", k, 1), ("hops", hops, 0), ("num_beams", num_beams, 1),
                                 ("ingest_batch_size", ingest_batch_size, 1), ("max_keywords", max_keywords, 1)):
            check_int(name, value, low)
        check_positive("temperature", temperature)
        check_int("context_tokens", context_tokens, 0, allow_none=True)
        check_bool("constraint", constraint)
        check_bool("evolution", evolution)
        if not constraint and embedder is None:
            raise ValueError("method.constraint=false (ablation w/o Cognitive Constraint) needs an embedder "
                             "(embedder=minilm): free keywords are mapped to concepts by cosine similarity")
        check_slot("recall_prompt", recall_prompt, "{question}")
        check_slot("free_recall_prompt", free_recall_prompt, "{question}")
        if turns_per_concept == "all":
            turns_per_concept = None
        elif not isinstance(turns_per_concept, int) or isinstance(turns_per_concept, bool) or turns_per_concept < 1:
            raise setting_error("turns_per_concept", "a positive int or 'all'", turns_per_concept)
        self.turns_per_concept = turns_per_concept
        self.k, self.hops, self.num_beams, self.temperature = k, hops, num_beams, float(temperature)
        self.constraint, self.evolution = constraint, evolution
        self.ingest_batch_size = ingest_batch_size
        self.recall_prompt, self.recall_prefix = recall_prompt, recall_prefix
        self.free_recall_prompt, self.free_recall_prefix = free_recall_prompt, free_recall_prefix
        self.max_keywords = max_keywords
        self.context_tokens = context_tokens
        self.separator = separator
        self.evolution_args = dict(
            evolution=evolution, threshold_mode=threshold_mode, keep_quantile=float(keep_quantile),
            trigger_quantile=float(trigger_quantile), threshold_warmup=threshold_warmup,
            keep_threshold=float(keep_threshold), trigger_threshold=float(trigger_threshold),
            min_assimilated=min_assimilated, max_keys=max_keys, max_free_keys=max_free_keys,
            max_concept_words=max_concept_words, free_max_new_tokens=free_max_new_tokens,
            prompt=ingest_prompt, answer_prefix=ingest_prefix)
        self._reset()
        Evolution(llm, self.schema, counters=Counter(), **self.evolution_args)  # validate the values now

    def _reset(self) -> None:
        self.schema = CognitiveSchema(self.llm.encode, self.llm.vocab_size, separator=self.separator,
                                      forbidden_ids=self.llm.eos_ids)
        self.graph = AssociativeGraph()
        self.index: dict[str, list[str]] = {}  # concept -> dia_ids
        self.turn_concepts: dict[str, list[str]] = {}  # dia_id -> concepts
        self.turns: dict[str, Turn] = {}
        self.counters = Counter()
        self.deviations = Counter()
        self._turn_tokens: dict[str, int] = {}
        self._concept_vectors: np.ndarray | None = None
        self.thresholds: dict[str, Any] = {}  # the assimilation cuts reached at the end of ingestion

    # ------------------------------------------------------------------ ingestion (3.4, 3.5)
    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        """Evolve S over the turns, batch by batch, and index each turn's concepts.

        Ingestion is greedy (deterministic), so `rng` is not drawn from.
        """
        problem = unmet(self.llm, self.needs)  # the harness asked before the first conversation (make_ready)
        if problem:
            raise TypeError(problem)
        self._reset()
        evolution = Evolution(self.llm, self.schema, counters=self.counters, **self.evolution_args)
        turns = conversation.turns
        for start in range(0, len(turns), self.ingest_batch_size):
            batch = turns[start:start + self.ingest_batch_size]
            for turn, result in zip(batch, evolution.process(batch)):
                self._index_turn(turn, result.concepts)
            self.thresholds = {"threshold_mode": evolution.threshold_mode,
                               "keep_cut_final": _finite_or_none(evolution.keep_cut),
                               "trigger_cut_final": _finite_or_none(evolution.trigger_cut)}
            if (start // self.ingest_batch_size) % 10 == 9:
                log.info("%s: %d/%d turns ingested, |S| = %d", conversation.sample_id, start + len(batch),
                         len(turns), len(self.schema))

    def _index_turn(self, turn: Turn, concepts: list[str]) -> None:
        self.turns[turn.dia_id] = turn
        self.turn_concepts[turn.dia_id] = list(concepts)
        for c in concepts:
            self.index.setdefault(c, []).append(turn.dia_id)
        self.graph.add_turn(concepts)

    # ------------------------------------------------------------------ recall (3.6)
    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        """Seeds for all questions in one generate call; then per question propagation and context."""
        if not questions:
            return []
        if len(self.schema) == 0:
            self.deviations["recall_no_seeds"] += len(questions)
            return [Recall("", [], {"seed_keys": [], "context_keys": [], "generated_keys": []}) for _ in questions]
        if self.constraint:
            seeds, generated, outside = constrained_seeds(self.llm, self.schema, questions, num_beams=self.num_beams,
                                                 prompt=self.recall_prompt, prefix=self.recall_prefix)
        else:
            seeds, generated, fallbacks = free_seeds(
                self.llm, self.embedder, self.schema, self.concept_vectors(), questions, num_seeds=self.num_beams,
                max_keywords=self.max_keywords, prompt=self.free_recall_prompt, prefix=self.free_recall_prefix)
            self.deviations["free_recall_no_keywords"] += fallbacks
            outside = [sum(k not in self.schema for k in keys) for keys in generated]  # free text: no token path
        out = []
        for q_seeds, q_keys, q_outside, budget, rng in zip(seeds, generated, outside, budget_tokens, rngs):
            self.count("keys_generated", len(q_keys))
            self.count("keys_outside_schema", q_outside)
            self.count("recall_keys_generated", len(q_keys))
            self.count("recall_keys_outside_schema", q_outside)
            if not q_seeds:
                self.deviations["recall_no_seeds"] += 1
            active = propagate(self.graph, q_seeds, k=self.k, hops=self.hops, temperature=self.temperature, rng=rng)
            ranked = [c for c, _ in active]
            cap = budget if self.context_tokens is None else min(budget, self.context_tokens)
            order = rank_turns(ranked, self.index, self.turn_concepts, self.turns_per_concept)
            context, dia_ids = reconstruct_context(order, self.turns, cap, self.llm.count_tokens, self._tokens_of)
            out.append(Recall(context, dia_ids, {"seed_keys": list(q_seeds), "context_keys": ranked,
                                                 "generated_keys": list(q_keys)}))
        return out

    def _tokens_of(self, turn: Turn) -> int:
        n = self._turn_tokens.get(turn.dia_id)
        if n is None:
            n = self._turn_tokens[turn.dia_id] = self.llm.count_tokens(render_turn(turn))
        return n

    def concept_vectors(self) -> np.ndarray:
        """(len(S), dim) embeddings of the concepts (the constraint=False ablation), cached."""
        if self._concept_vectors is None or len(self._concept_vectors) != len(self.schema):
            self._concept_vectors = self.embedder.encode(list(self.schema.concepts))
        return self._concept_vectors

    # ------------------------------------------------------------------ caching and reporting
    def memory_settings(self) -> dict[str, Any]:
        """What changes the built memory: ingestion prompts, thresholds, evolution, batching.

        Not k, hops, T, num_beams, constraint, the recall prompts or the context cap: they
        act at recall only, so sweeps over them reuse the cached memory.
        """
        return {"state_format": STATE_FORMAT, "ingest_version": INGEST_VERSION, "separator": self.separator,
                "ingest_batch_size": self.ingest_batch_size, **self.evolution_args}

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "concepts": [[c, s] for c, s in zip(self.schema.concepts, self.schema.surfaces)],
            "index": self.index,
            "turn_concepts": self.turn_concepts,
            "graph": self.graph.state_dict(),
            "turns": [dataclasses.asdict(t) for t in self.turns.values()],
            "counters": dict(self.counters),
            "deviations": dict(self.deviations),
            "thresholds": dict(self.thresholds),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a state written by `state_dict` (the memory cache): checked whole first
        (`check_state`), so a stored memory can never put a key outside the schema."""
        check_state(state)
        self._reset()
        for concept, surf in state["concepts"]:
            if not self.schema.add(concept, surf):
                raise ValueError(f"state: concept {concept!r} listed twice")
        self.index = {c: list(ids) for c, ids in state["index"].items()}
        self.turn_concepts = {d: list(cs) for d, cs in state["turn_concepts"].items()}
        self.graph.load_state_dict(state["graph"])
        self.turns = {t["dia_id"]: Turn(**t) for t in state["turns"]}
        self.counters = Counter(state["counters"])
        self.deviations = Counter(state["deviations"])
        self.thresholds = dict(state.get("thresholds", {}))

    def export(self) -> dict[str, Any]:
        """memory/<sample_id>.json: n_turns, concept -> dia_ids, and [u, v, w_uv] (Eq. 10 now)."""
        concepts = {c: list(self.index.get(c, [])) for c in self.schema.concepts}
        return {"n_turns": self.graph.n_turns, "concepts": concepts, "edges": self.graph.edges()}

    def stats(self) -> dict[str, Any]:
        c = self.counters
        out = {"deviations": dict(self.deviations), "keys_generated": c["keys_generated"],
               "keys_outside_schema": c["keys_outside_schema"], "turns": c["turns"],
               "accommodated_turns": c["accommodated_turns"], "assimilated_turns": c["assimilated_turns"],
               "schema_size": len(self.schema), "edges": self.graph.num_edges, **self.thresholds}
        out.update({key: value for key, value in sorted(c.items()) if key not in out})
        return out


MAX_STATE_COUNT = 10**12  # counters and deviations: above any run's


def check_state(state: dict[str, Any]) -> None:
    """Raise ValueError unless `state` is what `state_dict` writes: everything but the schema and
    the turns is recomputed from `turn_concepts` (the turns' concepts in ingestion order) and must
    match, so every concept of the index, the graph and the turns is in the schema, every edge joins
    two of them, every dia_id names a stored turn (the cache checks those against the conversation:
    scgmem/harness/cache_entry.py) and every count is the one ingestion gives."""
    def bad(field: str, value, why: str) -> ValueError:
        return ValueError(f"state: {field}: {repr(value)[:80]}: {why}")

    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ValueError(f"SCG-Mem state format {state.get('format') if isinstance(state, dict) else state!r} != "
                         f"{STATE_FORMAT}: rebuild the memory")
    pairs = state.get("concepts")
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) and x
                                                                                        for x in p) for p in pairs):
        raise bad("concepts", pairs, "must be [concept, surface] pairs of non-empty strings")
    concepts = [c for c, _ in pairs]
    for c, surf in pairs:
        if c != surf.lower() or normalise(c) != c:
            raise bad("concepts", [c, surf], "not a normalised concept with its surface form")
    known = set(concepts)
    if len(known) != len(concepts):
        raise bad("concepts", concepts, "a concept is listed twice")
    turns = state.get("turns")
    if not isinstance(turns, list) or not all(isinstance(t, dict) and isinstance(t.get("dia_id"), str) for t in turns):
        raise bad("turns", turns, "must be a list of turns")
    order = [t["dia_id"] for t in turns]
    if len(set(order)) != len(order):
        raise bad("turns", order, "a turn is stored twice")
    turn_concepts = state.get("turn_concepts")
    if not isinstance(turn_concepts, dict) or list(turn_concepts) != order:
        raise bad("turn_concepts", turn_concepts, "must list the stored turns' concepts, in their order")
    for dia_id, cs in turn_concepts.items():
        if not isinstance(cs, list) or not all(isinstance(c, str) and c in known for c in cs):
            raise bad(f"turn_concepts.{dia_id}", cs, "must be concepts of the schema")
    graph = AssociativeGraph()
    index: dict[str, list[str]] = {}
    for dia_id, cs in turn_concepts.items():  # ingestion again (`_index_turn`), without the model
        for c in cs:
            index.setdefault(c, []).append(dia_id)
        graph.add_turn(cs)
    if state.get("index") != index:
        raise bad("index", state.get("index"), "not the turns' concepts (concept -> the turns holding it)")
    if state.get("graph") != graph.state_dict():
        raise bad("graph", state.get("graph"), "not the counts of the turns' concepts (Eq. 10's N, df, count_uv)")
    for name in ("counters", "deviations"):
        counts = state.get(name)
        if not isinstance(counts, dict) or not all(isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool)
                                                   and 0 <= n <= MAX_STATE_COUNT for k, n in counts.items()):
            raise bad(name, counts, f"must map names to integers in [0, {MAX_STATE_COUNT}]")
    thresholds = state.get("thresholds", {})
    if not isinstance(thresholds, dict) or not all(
            v is None or isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                and math.isfinite(v)) for v in thresholds.values()):
        raise bad("thresholds", thresholds, "must map names to finite numbers, text or null")
