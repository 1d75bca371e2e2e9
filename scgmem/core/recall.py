"""Constructive recall (paper Section 3.6, Eq. 11-13).

1. Schema activation: constrained beam search over S with the question as context gives
   K_seed, the b most probable keys (Eq. 11; `beam_search.constrained_beam_search`).
   Ablation `constraint=False` ("w/o Cognitive Constraint", `free_seeds`): the model
   lists keywords freely; they are joined into one string, embedded, and the b concepts
   of S nearest by cosine become the seeds. The free keywords that are not concepts of S
   are the structural hallucinations of Definition 1, counted by the caller.
2. Associative propagation (Eq. 12-13, `propagate`): from each active concept u,
   P(v | u) = softmax_v(w_uv / T) over u's neighbours; neighbours are sampled without
   replacement (seeded, Gumbel-top-k) until k concepts are active; with hops > 1 the
   next hop starts from the concepts sampled in the previous one.
3. Context reconstruction (`rank_turns`, `reconstruct_context`): at most
   `turns_per_concept` turns of each active concept (those where most active concepts
   meet, then the newest), deduplicated, ranked seeds first then by activation, cut to the
   token budget (a cap, not the target), printed in chronological order with session
   dates. The dia_ids that made it in are recorded.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import numpy as np

from scgmem.api import Turn, dia_order, render_turn, render_turns_by_date
from scgmem.core.beam_search import constrained_beam_search
from scgmem.core.concepts import normalise, parse_list
from scgmem.core.graph import AssociativeGraph
from scgmem.core.schema import CognitiveSchema
from scgmem.llm.embedder import cosine_top_k

# Worded like the ingestion prompt (evolution.CONCEPT_PROMPT), so that a question meets
# its concepts in the register they were written in.
RECALL_PROMPT = "Extract the most important keyword of this question.\n\nQuestion: {question}"
RECALL_PREFIX = "Keyword:"
FREE_RECALL_PROMPT = ("Extract the 3 to 5 most important keywords of this question, separated by commas."
                      "\n\nQuestion: {question}")
FREE_RECALL_PREFIX = "Keywords:"


# ---------------------------------------------------------------------- 1. schema activation
def constrained_seeds(llm, schema: CognitiveSchema, questions: Sequence[str], *, num_beams: int,
                      prompt: str = RECALL_PROMPT,
                      prefix: str = RECALL_PREFIX) -> tuple[list[list[str]], list[list[str]], list[int]]:
    """Eq. 11 for every question in one beam-search call.

    Returns:
        (seeds per question: up to b concepts, best first;
         generated keys per question: every returned beam with a finite score, as the
         concept its tokens spell (a trie path), else its normalised text; deduplicated;
         keys outside S per question: beams whose tokens spell no concept. Membership is
         decided on the token path, not the decoded text, whose round trip may differ).
    """
    prompts = [llm.render(prompt.format(question=q), assistant_prefix=prefix) for q in questions]
    beams, lists = constrained_beam_search(llm, schema, prompts, num_beams=num_beams)
    seeds, generated, outside = [], [], []
    for found, row in zip(beams, lists):
        seeds.append([b.concept for b in found if b.concept in schema])
        keys = {(k.concept if k.concept is not None else normalise(k.text)): k.concept is None
                for kl in row if math.isfinite(kl.score) for k in kl.keys}
        generated.append(list(keys))
        outside.append(sum(keys.values()))
    return seeds, generated, outside


def free_seeds(llm, embedder, schema: CognitiveSchema, concept_vectors: np.ndarray, questions: Sequence[str], *,
               num_seeds: int, max_keywords: int = 5, max_new_tokens: int = 32, prompt: str = FREE_RECALL_PROMPT,
               prefix: str = FREE_RECALL_PREFIX) -> tuple[list[list[str]], list[list[str]], int]:
    """The `constraint=False` ablation: free keywords -> one string -> embedding -> nearest concepts.

    Args:
        concept_vectors: (len(schema), dim) unit embeddings of `schema.concepts`.

    Returns:
        (seeds per question, generated keywords per question (normalised), number of
        questions whose output held no keyword and whose question text was embedded instead).
    """
    prompts = [llm.render(prompt.format(question=q), assistant_prefix=prefix) for q in questions]
    gens = llm.generate(prompts, max_new_tokens=max_new_tokens)
    generated, queries, fallbacks = [], [], 0
    for q, (gen,) in zip(questions, gens):
        keys = [normalise(k) for k in parse_list(gen.text, max_keywords)]
        keys = list(dict.fromkeys(k for k in keys if k))
        generated.append(keys)
        if not keys:
            fallbacks += 1
        queries.append(", ".join(keys) if keys else q)
    vectors = embedder.encode(queries)  # (n_questions, dim)
    seeds = [[schema.concepts[i] for i in cosine_top_k(v, concept_vectors, num_seeds)] for v in vectors]
    return seeds, generated, fallbacks


# ---------------------------------------------------------------------- 2. propagation
def propagate(graph: AssociativeGraph, seeds: Sequence[str], *, k: int, hops: int, temperature: float,
              rng: np.random.Generator) -> list[tuple[str, float]]:
    """Eq. 12-13: the active concepts, ranked (seeds first, then by activation), with activations.

    Each hop gets an equal share of the remaining budget (k - active), so hops=2 reaches
    beyond the seeds' neighbours even when they alone could fill k; hops=1 spends it all
    on the seeds' neighbours. Within a hop the frontier draws in turns (round robin, in
    rank order), each concept from its own sample-without-replacement order of its
    neighbours, skipping concepts already active. A sampled v gets activation
    a(v) = a(u) * P(v | u); seeds have 1.

    Args:
        graph: the associative graph (weights by Eq. 10 now).
        seeds: K_seed, best first.
        k: total active concepts (seeds included).
        hops: propagation steps (0 = seeds only).
        temperature: T of softmax(w / T).
        rng: the question's generator (the only randomness).
    """
    # k >= 1, hops >= 0 and temperature > 0 are checked once, where they enter (SCGMem.__init__).
    active: dict[str, float] = {}
    for s in seeds:
        if len(active) < k and s not in active:
            active[s] = 1.0
    frontier = list(active)
    for hop in range(hops):
        budget = k - len(active)
        if budget <= 0 or not frontier:
            break
        quota = math.ceil(budget / (hops - hop))
        queues = []
        for u in frontier:
            names, weights = graph.neighbours(u)
            if not names:
                continue
            logits = weights / temperature  # (n,)
            logp = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
            keys = logp + rng.gumbel(size=len(names))  # Gumbel-top-k = sampling without replacement
            order = np.lexsort((np.arange(len(names)), -keys))
            queues.append([u, [names[i] for i in order], {names[i]: float(np.exp(logp[i])) for i in order}, 0])
        picked: list[str] = []
        while len(picked) < quota and queues:
            for queue in list(queues):
                u, order, prob, pos = queue
                while pos < len(order) and order[pos] in active:
                    pos += 1
                if pos == len(order):
                    queues.remove(queue)
                    continue
                v = order[pos]
                queue[3] = pos + 1
                active[v] = active[u] * prob[v]
                picked.append(v)
                if len(picked) == quota:
                    break
        frontier = picked
    seed_set = set(seeds)
    rest = sorted(((c, a, i) for i, (c, a) in enumerate(active.items()) if c not in seed_set),
                  key=lambda x: (-x[1], x[2]))
    return [(c, a) for c, a in active.items() if c in seed_set] + [(c, a) for c, a, _ in rest]


# ---------------------------------------------------------------------- 3. reconstruction
def rank_turns(ranked: Sequence[str], index: Mapping[str, Sequence[str]],
               turn_concepts: Mapping[str, Sequence[str]], turns_per_concept: int | None = None) -> list[str]:
    """dia_ids of the active concepts' turns, deduplicated, in concept rank order.

    Section 3.6 maps the activated concepts back to "the text segments associated with"
    them. Each concept contributes at most `turns_per_concept` turns (None = all of them; >= 1,
    checked where it enters, SCGMem.__init__),
    so the context is about k segments long and grows with k; a frequent concept cannot
    fill the window on its own. A concept's turns are ranked by how many active concepts
    are grounded in them (they sit where the activated ideas meet), then newest first:
    a later turn states the current fact of a long conversation (a plan that happened, a
    changed job), and the oldest turns stay reachable through their rarer concepts.
    With None the order is today's full list (ties chronological).
    """
    active = set(ranked)
    out: list[str] = []
    seen: set[str] = set()
    for concept in ranked:
        ids = [d for d in index.get(concept, ()) if d not in seen]
        meets = {d: sum(c in active for c in turn_concepts.get(d, ())) for d in ids}
        if turns_per_concept is None:
            ids.sort(key=lambda d: (-meets[d], dia_order(d)))
        else:
            ids.sort(key=lambda d: (-meets[d], tuple(-x for x in dia_order(d))))
            ids = ids[:turns_per_concept]
        for d in ids:
            seen.add(d)
            out.append(d)
    return out


def reconstruct_context(ranked_dia_ids: Sequence[str], turns: Mapping[str, Turn], budget_tokens: int,
                        count_tokens: Callable[[str], int],
                        turn_tokens: Callable[[Turn], int] | None = None) -> tuple[str, list[str]]:
    """Take turns in rank order while they fit `budget_tokens`; print them chronologically.

    Returns:
        (context text with DATE headers, the dia_ids in it in chronological order).
    """
    turn_tokens = turn_tokens or (lambda t: count_tokens(render_turn(t)))
    chosen: list[Turn] = []
    sessions: set[int] = set()
    used = 0
    for d in ranked_dia_ids:
        t = turns[d]
        cost = turn_tokens(t) + 1  # + the newline
        if t.session not in sessions:
            cost += count_tokens(f"DATE: {t.date_time}") + 1
        if used + cost > budget_tokens:
            break  # strict rank order: a lower-ranked turn never displaces a higher one
        chosen.append(t)
        sessions.add(t.session)
        used += cost
    while chosen:  # the estimate adds token counts; confirm on the rendered text
        kept = sorted(chosen, key=lambda t: dia_order(t.dia_id))
        text = render_turns_by_date(kept)
        if count_tokens(text) <= budget_tokens:
            return text, [t.dia_id for t in kept]
        chosen.pop()
    return "", []
