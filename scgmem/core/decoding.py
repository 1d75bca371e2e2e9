"""Constrained generation of key lists, and reading the keys back (paper Section 3.3).

`generate_keys` runs one `generate` call of the LLM for many prompts under the schema
constraint (Eq. 6), stated as data (`KeyConstraint`): keys are written as " k1, k2, k3",
EOS ends the list wherever a key may end (one EOS id only, `key_end_id`, so a key ends
one way), and after `max_keys` keys only EOS may follow. Each backend compiles the
constraint's rule (`scgmem.llm.key_rule`) its own way: the local one into logits processors
(scgmem/llm/local/constraint.py), a serving engine into a token-id grammar and client-side
steps (scgmem/llm/served). `KeyReader` reads every returned sequence back into keys from
its ids and raw log-probs, whichever backend produced them, by replaying the same rule.

Example::

    keys = generate_keys(llm, schema, [prompt], max_keys=5)[0][0]
    [(k.concept, round(k.mean_logprob, 2)) for k in keys.keys]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from scgmem.core.schema import CognitiveSchema, TokenTrie
from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.key_rule import DEAD, DONE, KeyRule, RowState
from scgmem.llm.protocol import Generation, LanguageModel


@dataclass
class GeneratedKey:
    """One key of a generated list.

    Attributes:
        text: the key as decoded (surface form, stripped).
        concept: the concept of S its tokens spell, or None when they spell none.
        token_ids: the key's tokens (terminator excluded).
        logprob: raw log-prob of its tokens and terminator (NaN when not recorded).
        n_tokens: tokens scored (key + terminator).
    """

    text: str
    concept: str | None
    token_ids: list[int]
    logprob: float
    n_tokens: int

    @property
    def mean_logprob(self) -> float:
        return self.logprob / max(1, self.n_tokens)


@dataclass
class KeyList:
    """The keys of one generated sequence; `score` is the backend's (beam: cumulative log-prob)."""

    keys: list[GeneratedKey] = field(default_factory=list)
    score: float = 0.0
    text: str = ""
    complete: bool = True  # False when it stopped inside a key (or its state was not tracked)
    tracked: bool = True

    @property
    def mean_logprob(self) -> float:
        """Raw log-prob per token over all its keys (NaN without keys)."""
        n = sum(k.n_tokens for k in self.keys)
        return sum(k.logprob for k in self.keys) / n if n else float("nan")


class KeyReader:
    """Reads the keys of a generated sequence from its ids and raw log-probs, whichever backend
    produced them, by replaying the key-list rule's transitions (`KeyRule.step`) from the root: the
    same states the local processor reached, and for a server's reply the check that every
    generated key is a path of S (a key outside it is kept with concept None and counted by
    the caller, never trusted).

    Args:
        schema: S.
        constraint: the call's `KeyConstraint`.
        decode: token ids -> text (the tokenizer's decode).
    """

    def __init__(self, schema: CognitiveSchema, constraint: KeyConstraint, decode: Callable[[list[int]], str]) -> None:
        self.schema = schema
        self.decode = decode
        self.rule = KeyRule.of(constraint)

    def _key(self, ids: list[int], start: int, end: int, logprob: float) -> GeneratedKey:
        body = ids[start:end]
        if body and body[-1] == self.schema.terminator:
            body = body[:-1]
        return GeneratedKey(text=self.decode(body).strip(), concept=self.schema.concept_of_tokens(body),
                            token_ids=body, logprob=logprob, n_tokens=end - start)

    def read(self, gen: Generation) -> KeyList:
        """The keys of one generated sequence (token ids without the final EOS)."""
        ids, score, text = list(gen.token_ids), gen.logprob, gen.text
        if gen.token_logprobs is None or len(gen.token_logprobs) != len(ids):
            keys, begin = [], 0  # not tracked: split on the terminator, log-probs unknown
            for i, t in enumerate(ids + [self.schema.terminator]):
                if t == self.schema.terminator and i > begin:
                    keys.append(self._key(ids, begin, i + 1, float("nan")))
                    begin = i + 1
            return KeyList(keys, score, text, complete=False, tracked=False)
        state = RowState(TokenTrie.ROOT)
        for position, (token, lp) in enumerate(zip(ids, gen.token_logprobs)):
            state = self.rule.step(state, token, lp, position)
        eos_lp = float("nan") if gen.end_logprob is None else gen.end_logprob
        keys = [self._key(ids, s, e, lp) for s, e, lp in state.keys]
        complete = True
        if state.node >= 0 and state.key_start < len(ids):  # a key is open: did the end id end it here?
            ended = self.rule.step(state, self.rule.eos_ids[0], eos_lp, len(ids))  # the rule's own answer
            if ended.node == DONE and len(ended.keys) > len(state.keys):
                key = self._key(ids, state.key_start, len(ids), ended.keys[-1][2])
                key.n_tokens += 1  # EOS stands in for the terminator
                keys.append(key)
            else:
                complete = False  # cut inside a key (max_new_tokens)
        elif state.node == DEAD:
            complete = False
        return KeyList(keys, score, text, complete=complete)


def key_end_id(llm: LanguageModel) -> int:
    """The one EOS id that may end a key: the tokenizer's own end-of-turn token.

    Qwen2.5 stops on two ids and Llama 3.2 on three. If each could end a key, one key would
    finish as several beams (the same concept, split by its last token), and keeping each
    concept once would leave fewer than b seeds. The others stay masked.
    """
    return llm.eos_id if llm.eos_id in llm.eos_ids else llm.eos_ids[0]


def generate_keys(llm: LanguageModel, schema: CognitiveSchema, prompts: Sequence[str], *, max_keys: int | None = None,
                  num_beams: int = 1, temperature: float = 0.0, seeds: Sequence[int] | None = None,
                  max_new_tokens: int | None = None) -> tuple[list[list[KeyList]], KeyReader]:
    """Constrained generation of key lists, one call for all prompts.

    Args:
        llm: the model (its `decode` spells the keys back).
        schema: S, non-empty.
        prompts: rendered prompts (ending where the first key's leading space is natural,
            e.g. after "Concepts:").
        max_keys: keys per sequence; None = until EOS.
        num_beams: beam search width (num_return_sequences = num_beams).
        temperature / seeds: sampling (temperature > 0, one seed per prompt).
        max_new_tokens: default `max_keys * max_depth`, which always leaves room to finish
            (each key takes at most `max_depth` tokens with its terminator or EOS).

    Returns:
        (per prompt, per returned sequence: a `KeyList`; the `KeyReader` used).
    """
    if len(schema) == 0:
        raise ValueError("generate_keys: the schema is empty")
    if max_new_tokens is None:
        max_new_tokens = (max_keys or 8) * schema.trie.max_depth
    constraint = KeyConstraint(schema.trie, terminator=schema.terminator, end_id=key_end_id(llm), max_keys=max_keys)
    gens = llm.generate(list(prompts), max_new_tokens=max_new_tokens, temperature=temperature, seeds=seeds,
                        constraint=constraint, num_beams=num_beams, num_return_sequences=max(1, num_beams),
                        length_penalty=0.0)
    reader = KeyReader(schema, constraint, llm.decode)
    return [[reader.read(g) for g in row] for row in gens], reader
