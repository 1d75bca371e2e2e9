"""A `KeyConstraint` compiled for the local transformers backend: the schema trie's logits
processors (paper Eq. 6) and, after generation, the raw log-probs they recorded for each
returned sequence. The local twin of the served backend's `lark_trie` + `keys`: both compile the
one key-list rule (`scgmem.llm.key_rule`).

The processor records the raw log-prob of every generated prefix's last token and of the end
id next (one step behind the scores, see `schema_processor.RawLogprobs`); `logprobs` reads them
back per sequence, so a local `Generation` carries the same `token_logprobs` / `end_logprob` a
server reply is turned into, and the method reads keys from either alike.
"""
from __future__ import annotations

from typing import Sequence

from transformers import LogitsProcessor

from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.local.key_tracker import KeyTracker, prompt_key
from scgmem.llm.local.schema_processor import MaskRows, SchemaConstraint


class LocalKeyConstraint:
    """A `KeyConstraint` as the processor factory of one constrained `LLM.generate` call
    (`processors=` of the backend; named "SchemaDecoding" in the settings log).

    One `KeyTracker` (the key-list rule of the constraint, with every generated prefix's state) and
    one set of mask rows serve the whole call: its batches share the trie.

    Args:
        constraint: what may be generated (trie, terminator, the one end id, max_keys, distinct,
            record_logprobs).
        pad_id: the model's padding token.
        beams: beam search hands the processors log_softmax scores (transformers' beam search).
    """

    def __init__(self, constraint: KeyConstraint, *, pad_id: int, beams: bool) -> None:
        self.scores_are_logprobs = beams
        self.pad_id = pad_id
        self.record_logprobs = constraint.record_logprobs
        self.tracker = KeyTracker.of(constraint)
        self.mask_rows = MaskRows(self.tracker, pad_id)
        self.processors: list[SchemaConstraint] = []

    def __call__(self, prompt_length: int, rows: int) -> list[LogitsProcessor]:
        proc = SchemaConstraint(self.tracker, prompt_length, pad_id=self.pad_id, mask_rows=self.mask_rows,
                                record_logprobs=self.record_logprobs, scores_are_logprobs=self.scores_are_logprobs)
        self.processors.append(proc)
        return [proc]

    @property
    def dead_rows(self) -> int:
        return sum(p.dead_rows for p in self.processors)

    def logprobs(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> tuple[list[float] | None, float | None]:
        """(raw log-prob of each token, raw log-prob of the end id after them); (None, None) when
        the sequence was not tracked (a prompt the processors never saw)."""
        return self.tracker.token_logprobs(prompt_key(prompt_ids, self.pad_id), list(token_ids))
