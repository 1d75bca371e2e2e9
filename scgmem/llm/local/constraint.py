"""A `KeyConstraint` compiled for the local transformers backend: the schema trie's logits
processor (`scgmem.core.decoding.SchemaDecoding`, paper Eq. 6) and, after generation, the raw
log-probs it recorded for each returned sequence.

The processor records the raw log-prob of every generated prefix's last token and of the end
id next (one step behind the scores, see `scgmem.core.constraint.RawLogprobs`); `logprobs`
reads them back per sequence, so a local `Generation` carries the same `token_logprobs` /
`end_logprob` a server reply is turned into, and the method reads keys from either alike.
"""
from __future__ import annotations

from typing import Sequence

from scgmem.core.decoding import SchemaDecoding
from scgmem.core.key_state import prompt_key
from scgmem.llm.constraint_spec import KeyConstraint


class LocalKeyConstraint(SchemaDecoding):
    """The processor factory of one constrained `LLM.generate` call (`processors=` of the backend).

    Args:
        constraint: what may be generated.
        pad_id: the model's padding token.
        beams: beam search hands the processors log_softmax scores (transformers' beam search).
    """

    def __init__(self, constraint: KeyConstraint, *, pad_id: int, beams: bool) -> None:
        super().__init__(constraint.trie, terminator=constraint.terminator, eos_ids=[constraint.end_id],
                         pad_id=pad_id, max_keys=constraint.max_keys, distinct=constraint.distinct,
                         record_logprobs=constraint.record_logprobs, scores_are_logprobs=beams)

    def logprobs(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> tuple[list[float] | None, float | None]:
        """(raw log-prob of each token, raw log-prob of the end id after them); (None, None) when
        the sequence was not tracked (a prompt the processors never saw)."""
        return self.tracker.token_logprobs(prompt_key(prompt_ids, self.pad_id), list(token_ids))
