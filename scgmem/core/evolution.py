"""Schema evolution: assimilation and accommodation (paper Section 3.4, Eq. 7-9).

For each new turn d(t):

1. Assimilation (Eq. 7): if S is not empty, constrained generation (Section 3.3) maps the
   turn to existing concepts; a key is kept when its length-normalised *raw* log-prob
   (under the model's own distribution, see `decoding`) is at least the keep threshold.
2. Accommodation (Eq. 8-9) is triggered when assimilation represents the turn badly: S
   empty, fewer than `min_assimilated` keys kept, or the mean raw log-prob per token of
   all generated keys below the trigger threshold (the paper's "high perplexity"). The
   constraint is lifted: the model lists the turn's concepts freely; candidates are
   parsed, normalised and validated (`concepts.rejection`), and those not in S are
   inserted into the trie. A list cut by `free_max_new_tokens` loses its last candidate
   (it may stop mid-phrase).

Thresholds. "High perplexity" is relative to the model: a 3B model's log-probs sit far
from a 135M model's, so fixed numbers do not carry over. With `threshold_mode="quantile"`
(default) the thresholds are quantiles of the model's own scores on the conversation so
far: a key is kept when its score is at least the `keep_quantile` quantile of every
assimilation key scored so far, and a turn accommodates when its mean is below the
`trigger_quantile` quantile of the turn means so far. Until `threshold_warmup` turns have
been scored there is no distribution yet: every key in S is kept and every turn also
accommodates (the young schema is still being built). `threshold_mode="absolute"` uses
`keep_threshold` / `trigger_threshold` as raw log-probs per token; the defaults were
calibrated on SmolLM2-135M. To calibrate them for another model, run the quantile mode on
one conversation and read the final cuts (`keep_cut_final`, `trigger_cut_final` in the
method stats).
3. The turn's concepts K = K_assim + K_nov are returned for indexing (dia_id index and
   associative graph).

Ablation `evolution=False` ("w/o Evolutionary Update"): no assimilation; every turn is
accommodated and keeps only *new* concepts, so no turn is ever grounded in a concept
that existed before it.

Batching: turns are processed `batch` at a time - assimilation for the batch in one
generate call against S as it stood before the batch, then accommodation for the turns
that need it in one call, then insertion in turn order. A turn therefore cannot
assimilate into a concept created by an earlier turn of the same batch (with
evolution=True it still gets that concept if its free list names it). The batch size is
a config value (`ingest_batch_size`).

Robustness: a small model's free output is often malformed; nothing here raises on it.
Every dropped candidate or key is counted by reason in `counters`.
"""
from __future__ import annotations

import bisect
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from scgmem.api import Turn, render_turn
from scgmem.api.settings import check_choice, check_int, check_range, check_slot
from scgmem.core.concepts import grounding_words, normalise, parse_list, rejection, surface
from scgmem.core.decoding import generate_keys
from scgmem.core.schema import CognitiveSchema

log = logging.getLogger(__name__)

# One instruction for both steps: the constraint, not the wording, is what changes.
# The schema is never listed in the prompt (the trie constrains instead), which keeps
# ingestion prompts short (~70 tokens with SmolLM2's template; the goal, `make bench`'s
# "ingest token ratio", is at most half of A-MEM's ingestion tokens). The instruction comes
# first so that every turn's prompt shares one prefix (KV-cache reuse). "Keywords:" as the assistant's primer made
# SmolLM2-135M answer with a comma-separated list (with "Concepts:" it wrote numbered
# sentences); the keys then follow with their natural leading space.
CONCEPT_PROMPT = "Extract the 3 to 5 most important keywords of this message, separated by commas.\n\nMessage: {turn}"
ANSWER_PREFIX = "Keywords:"


@dataclass
class TurnConcepts:
    """What evolution decided for one turn."""

    dia_id: str
    assimilated: list[str] = field(default_factory=list)  # K_assim (existing concepts kept)
    novel: list[str] = field(default_factory=list)  # K_nov (from accommodation)
    accommodated: bool = False  # accommodation was triggered
    mean_logprob: float = float("nan")  # raw log-prob per token of the assimilation keys

    @property
    def concepts(self) -> list[str]:
        return list(dict.fromkeys(self.assimilated + self.novel))


class Evolution:
    """Assimilation + accommodation over batches of turns, growing `schema` in place.

    Args:
        llm: the `LLM` (real generate with logits processors).
        schema: the cognitive schema S (grown by accommodation).
        evolution: False = ablation "w/o Evolutionary Update" (see module docstring).
        threshold_mode: "quantile" (relative to the model's scores so far) or "absolute".
        keep_quantile / trigger_quantile / threshold_warmup: the quantile mode (see module docstring).
        keep_threshold: min raw log-prob per token for an assimilated key to be kept.
        trigger_threshold: accommodation when the assimilation keys' mean raw log-prob per
            token is below this.
        min_assimilated: accommodation when fewer keys than this were kept.
        max_keys: keys per assimilation list.
        max_free_keys: candidates read from an accommodation list.
        max_concept_words: longest concept.
        free_max_new_tokens: generation budget of the accommodation list.
        prompt / answer_prefix: the instruction after the turn, and the assistant's primer.
        counters: where drops and decisions are counted (shared with the method).
    """

    def __init__(self, llm, schema: CognitiveSchema, *, evolution: bool = True, threshold_mode: str = "quantile",
                 keep_quantile: float = 0.5, trigger_quantile: float = 0.3, threshold_warmup: int = 16,
                 keep_threshold: float = -2.5,
                 trigger_threshold: float = -3.0, min_assimilated: int = 1, max_keys: int = 5,
                 max_free_keys: int = 8, max_concept_words: int = 4, free_max_new_tokens: int = 24,
                 prompt: str = CONCEPT_PROMPT, answer_prefix: str = ANSWER_PREFIX,
                 counters: Counter | None = None) -> None:
        check_slot("ingest_prompt", prompt, "{turn}")
        for name, value in (("max_keys", max_keys), ("max_free_keys", max_free_keys), ("max_concept_words", max_concept_words),
                            ("free_max_new_tokens", free_max_new_tokens), ("threshold_warmup", threshold_warmup)):
            check_int(name, value)
        check_int("min_assimilated", min_assimilated, 0)
        check_choice("threshold_mode", threshold_mode, ("quantile", "absolute"))
        check_range("keep_quantile", keep_quantile, 0, 1)
        check_range("trigger_quantile", trigger_quantile, 0, 1)
        self.llm = llm
        self.schema = schema
        self.evolution = evolution
        self.threshold_mode = threshold_mode
        self.keep_quantile, self.trigger_quantile = keep_quantile, trigger_quantile
        self.threshold_warmup = threshold_warmup
        self.keep_threshold, self.trigger_threshold = keep_threshold, trigger_threshold
        # The model's own scores on this conversation so far (sorted), for the quantile mode.
        self.key_scores: list[float] = []
        self.turn_scores: list[float] = []
        self._quantile_cuts = (-math.inf, math.inf)  # warm-up: keep every key, accommodate every turn
        self.min_assimilated = min_assimilated
        self.max_keys = max_keys
        self.max_free_keys = max_free_keys
        self.max_concept_words = max_concept_words
        self.free_max_new_tokens = free_max_new_tokens
        self.prompt, self.answer_prefix = prompt, answer_prefix
        self.counters = counters if counters is not None else Counter()

    def render(self, turn: Turn) -> str:
        return self.llm.render(self.prompt.format(turn=render_turn(turn)), assistant_prefix=self.answer_prefix)

    # ------------------------------------------------------------------ thresholds
    @property
    def keep_cut(self) -> float:
        """The keep threshold now, as a raw log-prob per token."""
        return self.keep_threshold if self.threshold_mode == "absolute" else self._quantile_cuts[0]

    @property
    def trigger_cut(self) -> float:
        """The trigger threshold now, as a raw log-prob per token."""
        return self.trigger_threshold if self.threshold_mode == "absolute" else self._quantile_cuts[1]

    def _observe(self, lists) -> None:
        """Add a batch's assimilation scores to the running distributions, then update the cuts."""
        for (keys,) in lists:
            if math.isfinite(keys.mean_logprob):
                bisect.insort(self.turn_scores, keys.mean_logprob)
            for key in keys.keys:
                if key.concept is not None and math.isfinite(key.mean_logprob):
                    bisect.insort(self.key_scores, key.mean_logprob)
        if len(self.turn_scores) >= self.threshold_warmup:
            self._quantile_cuts = (_quantile(self.key_scores, self.keep_quantile),
                                   _quantile(self.turn_scores, self.trigger_quantile))

    # ------------------------------------------------------------------ Eq. 7
    def assimilate(self, turns: Sequence[Turn]) -> list[TurnConcepts]:
        """Constrained mapping of each turn to existing concepts (one generate call)."""
        results = [TurnConcepts(t.dia_id) for t in turns]
        if not self.evolution or len(self.schema) == 0:
            return results
        lists, _ = generate_keys(self.llm, self.schema, [self.render(t) for t in turns], max_keys=self.max_keys)
        self._observe(lists)
        c = self.counters
        for result, (keys,) in zip(results, lists):
            if not keys.tracked:
                c["assimilation_untracked"] += 1
            result.mean_logprob = keys.mean_logprob
            for key in keys.keys:
                concept = key.concept  # the token path spells a concept of S, or None
                c["keys_generated"] += 1
                if concept is None or concept not in self.schema:  # Definition 1: measured, not assumed
                    c["keys_outside_schema"] += 1
                    continue
                if not math.isfinite(key.mean_logprob) or key.mean_logprob < self.keep_cut:
                    c["assimilation_dropped_logprob"] += 1
                    continue
                if concept not in result.assimilated:
                    result.assimilated.append(concept)
                    c["assimilation_kept"] += 1
        return results

    def needs_accommodation(self, result: TurnConcepts) -> bool:
        """The trigger rule: S empty, too few keys kept, or high perplexity."""
        if not self.evolution or len(self.schema) == 0:
            return True
        if len(result.assimilated) < self.min_assimilated:
            return True
        return not (result.mean_logprob >= self.trigger_cut)  # NaN triggers too

    # ------------------------------------------------------------------ Eq. 8-9
    def propose(self, turns: Sequence[Turn]) -> list[list[tuple[str, str]]]:
        """Free generation (constraint lifted) -> valid (concept, surface) candidates per turn."""
        if not turns:
            return []
        gens = self.llm.generate([self.render(t) for t in turns], max_new_tokens=self.free_max_new_tokens)
        out = []
        for turn, (gen,) in zip(turns, gens):
            grounding = grounding_words(turn.text, turn.caption)
            candidates: list[tuple[str, str]] = []
            parsed = parse_list(gen.text)
            if parsed and self._cut_short(gen):
                parsed.pop()  # the list hit the token budget: its last candidate may be half a phrase
                self.counters["accommodation_dropped_truncated"] += 1
            parsed = parsed[:self.max_free_keys]
            self.counters["accommodation_candidates"] += len(parsed)
            if not parsed:
                self.counters["accommodation_unparseable"] += 1
            for cand in parsed:
                reason = rejection(cand, grounding, self.max_concept_words)
                if reason is not None:
                    self.counters[f"accommodation_dropped_{reason}"] += 1
                    continue
                concept = normalise(cand)
                if any(concept == c for c, _ in candidates):
                    self.counters["accommodation_dropped_duplicate"] += 1
                    continue
                candidates.append((concept, surface(cand)))
            out.append(candidates)
        return out

    def _cut_short(self, gen) -> bool:
        """Whether a free list stopped at `free_max_new_tokens` inside its last item."""
        if len(gen.token_ids) < self.free_max_new_tokens:
            return False  # it ended with EOS (or a stop) before the budget
        return not (gen.text.endswith("\n") or gen.text.rstrip().endswith((",", ";")))

    def process(self, turns: Sequence[Turn]) -> list[TurnConcepts]:
        """One ingestion batch: assimilate, accommodate those that need it, insert (in turn order)."""
        results = self.assimilate(turns)
        todo = [i for i, r in enumerate(results) if self.needs_accommodation(r)]
        proposals = self.propose([turns[i] for i in todo])
        c = self.counters
        for i, candidates in zip(todo, proposals):
            result = results[i]
            result.accommodated = True
            for concept, surf in candidates:
                if concept in self.schema:
                    if not self.evolution:  # the ablation keeps only new concepts
                        c["accommodation_dropped_existing"] += 1
                        continue
                    if concept not in result.assimilated:
                        result.novel.append(concept)
                    continue
                try:
                    self.schema.add(concept, surf)
                except ValueError as e:
                    log.debug("concept not insertable: %s", e)
                    c["accommodation_dropped_untokenisable"] += 1
                    continue
                c["concepts_inserted"] += 1
                result.novel.append(concept)
        for r in results:
            c["turns"] += 1
            c["accommodated_turns"] += r.accommodated
            c["assimilated_turns"] += bool(r.assimilated)
            c["turns_without_concepts"] += not r.concepts
        return results


def _quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of a sorted list (linear interpolation, like numpy's default)."""
    if not sorted_values:
        return -math.inf
    pos = q * (len(sorted_values) - 1)
    low = int(math.floor(pos))
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)
