"""Seed activation by constrained beam search (paper Section 3.6, Eq. 11).

With `max_keys=1` and `num_beams=b`, the schema-constrained generation of
`decoding.generate_keys` returns b keys of S with their cumulative log-probabilities:
the b most probable keys under the model, the question's seeds.

Example::

    seeds = constrained_beam_search(llm, schema, [question_prompt], num_beams=5)[0][0]
    [(s.concept, round(s.logprob, 2)) for s in seeds]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from scgmem.core.decoding import KeyList, generate_keys
from scgmem.core.schema import CognitiveSchema
from scgmem.llm.protocol import LanguageModel


@dataclass
class BeamKey:
    """One result of the constrained beam search (Eq. 11)."""

    concept: str
    text: str
    logprob: float  # cumulative log-prob of the key under the model (EOS included)


def constrained_beam_search(llm: LanguageModel, schema: CognitiveSchema, prompts: Sequence[str], *,
                            num_beams: int) -> tuple[list[list[BeamKey]], list[list[KeyList]]]:
    """Eq. 11: the b most probable keys of S for each prompt, distinct, best first.

    Beam search with `num_beams=b` and one key per beam; returned beams with a -inf score
    (fillers when S holds fewer than b reachable keys) are dropped, and repeats of a
    concept kept once.

    Returns:
        (per prompt: up to b `BeamKey`s; per prompt: the raw `KeyList`s, for counting keys).
    """
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    lists, _ = generate_keys(llm, schema, prompts, max_keys=1, num_beams=num_beams,
                             max_new_tokens=schema.trie.max_depth)
    results = []
    for row in lists:
        seen, keys = set(), []
        for kl in sorted(row, key=lambda kl: -kl.score):
            if not math.isfinite(kl.score) or len(kl.keys) != 1 or not kl.complete:
                continue
            key = kl.keys[0]
            name = key.concept if key.concept is not None else key.text
            if name in seen:
                continue
            seen.add(name)
            keys.append(BeamKey(concept=name, text=key.text, logprob=kl.score))
        results.append(keys)
    return results, lists
