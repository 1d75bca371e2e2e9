"""Schema-constrained decoding as a logits processor (paper Section 3.3, Eq. 6): the local twin of
the served backend's grammar compiler (`scgmem.llm.served.lark_trie` + `keys`).

`SchemaConstraint` is a transformers `LogitsProcessor`: for every row of a batch
(batch * num_beams rows under beam search) it sets the scores of the tokens the key-list rule
(`scgmem.llm.key_rule`) does not allow to -inf. The softmax that follows renormalises over the
allowed tokens (Eq. 6). It serves greedy decoding, seeded sampling and beam search alike.

It is built from three parts, one job each:

* `KeyTracker` (`key_tracker`): the rule's state of each row, per generated prefix;
* `RawLogprobs`: the raw log-prob of each chosen token and of EOS next, under the model's
  own distribution, before the mask (the renormalised constrained distribution would hide
  the "perplexity" signal of Section 3.4: a token with no sibling would always score 0);
* `MaskRows`: the mask row of each `Allowed` the rule gives (trie node's tokens, plus and minus
  a few), built when it first occurs in a call from the trie's precomputed node rows and kept on
  the scores' device, so a step only stacks cached rows.

A finished row only pads (EOS or the pad token).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Protocol, Sequence, runtime_checkable

import torch
from transformers import LogitsProcessor

from scgmem.llm.key_rule import DEAD, FINISHED, Allowed, RowState
from scgmem.llm.local.key_tracker import KeyTracker, prompt_key

@runtime_checkable
class MaskIndex(Protocol):
    """What the masking rows read off a trie beyond `TrieView` (scgmem.llm.constraint_spec): each
    node's allowed tokens precomputed as tensors. The schema's `TokenTrie` (scgmem/core/schema.py)
    keeps them up to date at insert time, so a mask row is one copy, not a walk over children."""

    vocab_size: int

    def allowed(self, node: int) -> torch.Tensor:
        """Sorted ids of the tokens that may follow `node`, a (n,) long tensor."""

    def dense_allowed(self, node: int) -> torch.Tensor | None:
        """(vocab,) bool row, True where allowed, for a node with many children; else None."""


MASK_ROWS_BYTES = 64 << 20  # cached mask rows per call (Qwen2.5's 151,936-token rows: ~440 of them)


class RawLogprobs:
    """Raw log-probs of the chosen tokens and of EOS, one step behind the scores.

    At step t a row's last token was chosen from the scores of step t-1, by the row that
    held its parent prefix then (beam search reorders rows), so the previous step's scores
    and their logsumexp are kept.

    Args:
        eos_ids: the tokens that end the generation (their total is the EOS log-prob).
        scores_are_logprobs: the scores are already log-probs (transformers' beam search
            passes log_softmax(logits)), so the logsumexp pass is skipped.
    """

    def __init__(self, eos_ids: Sequence[int], scores_are_logprobs: bool = False) -> None:
        self.eos = torch.tensor(sorted({int(i) for i in eos_ids}), dtype=torch.long)  # (n_eos,)
        # the one EOS id SCG-Mem's calls allow (decoding.key_end_id): its logsumexp is its score, exactly
        self._single_eos = int(self.eos[0]) if len(self.eos) == 1 else None
        self.scores_are_logprobs = scores_are_logprobs
        self._scores: torch.Tensor | None = None  # previous step's raw scores, (rows, vocab)
        self._lse: torch.Tensor | None = None  # their logsumexp, (rows,); None: they are log-probs (lse 0)
        self._before: tuple = (None, None)  # the step's before the last `observe`, for `chosen(..., before=True)`

    def chosen(self, last: torch.Tensor, parent_rows: torch.Tensor | list[int] | None = None,
               before: bool = False) -> torch.Tensor:
        """(rows,) raw log-prob of each row's last token (`last`, (rows,)) on the scores' device,
        read from the row of the previous step's scores that held its parent prefix (`parent_rows`,
        (rows,), a device tensor costs no host copy; None: every row its own). `before`: the scores
        seen before the last `observe` (a step whose parents were known only after it)."""
        scores, lse = self._before if before else (self._scores, self._lse)
        last = last.to(scores.device)  # (rows,)
        if parent_rows is None:
            picked = scores.gather(1, last[:, None]).squeeze(1).float()  # (rows,)
            return picked if lse is None else picked - lse
        prev_rows = torch.as_tensor(parent_rows, dtype=torch.long).to(scores.device)  # (rows,)
        picked = scores[prev_rows, last].float()
        return picked if lse is None else picked - lse[prev_rows]

    def observe(self, scores: torch.Tensor) -> torch.Tensor:
        """(rows,) raw log-prob of ending here with EOS; keeps `scores` for the next step."""
        self._before = (self._scores, self._lse)
        self._scores = scores
        # log-probs already: their logsumexp is 0, and x - 0 is x, so nothing is computed
        self._lse = None if self.scores_are_logprobs else torch.logsumexp(scores.float(), dim=-1)  # (rows,)
        if self._single_eos is not None:
            end = scores[:, self._single_eos].float()  # (rows,): logsumexp of one value is that value
        else:
            if self.eos.device != scores.device:
                self.eos = self.eos.to(scores.device)  # once per call, not once per step
            end = torch.logsumexp(scores[:, self.eos].float(), dim=-1)
        return end if self._lse is None else end - self._lse


class MaskRows:
    """The (vocab,) mask row, True = disallowed, of each `Allowed` of one call.

    A row's mask is what the key-list rule allows after its state (`KeyRule.allowed_set`): the
    trie node's tokens (a precomputed dense row or id tensor of the trie), plus the end ids where a
    key may end, minus the terminator of a last key and the spent tokens. Each distinct `Allowed`
    is built the first time it occurs, on the scores' device (the trie is fixed during a call), and
    a step stacks the rows of its states. The rows used least recently are dropped beyond
    `max_bytes` (a recall call over many questions visits thousands of trie nodes); a dropped row
    is built again when needed.
    """

    def __init__(self, tracker: KeyTracker, pad_id: int, max_bytes: int = MASK_ROWS_BYTES) -> None:
        if not isinstance(tracker.trie, MaskIndex):
            raise TypeError(f"{type(tracker.trie).__name__} has no precomputed mask rows (allowed, dense_allowed): "
                            "the local backend masks from a MaskIndex such as scgmem.core.schema.TokenTrie")
        self.tracker = tracker
        self.trie: MaskIndex = tracker.trie
        self.pad_id = int(pad_id)
        self.capacity = max(1, max_bytes // tracker.trie.vocab_size)  # rows of one byte per token
        self._device: torch.device | None = None
        self._rows: OrderedDict[Allowed, torch.Tensor] = OrderedDict()

    def mask(self, states: Sequence[RowState], device: torch.device) -> torch.Tensor:
        """(rows, vocab) bool, True where a token is disallowed."""
        if self._device != device:
            self._device, self._rows = device, OrderedDict()
        rows, by_state = [], {}  # many rows hold the same state object (the first step, finished rows)
        for state in states:
            row = by_state.get(id(state))
            if row is not None:
                rows.append(row)
                continue
            situation = self.situation(state)
            row = self._rows.get(situation)
            if row is None:
                row = self._rows[situation] = self._build(situation)
                if len(self._rows) > self.capacity:
                    self._rows.popitem(last=False)
            else:
                self._rows.move_to_end(situation)
            by_state[id(state)] = row
            rows.append(row)
        return torch.stack(rows)

    def situation(self, state: RowState) -> Allowed:
        """What a row's mask depends on: the rule's `Allowed` after its state."""
        return self.tracker.allowed_set(state)

    def _build(self, allowed: Allowed) -> torch.Tensor:
        device = self._device
        mask = torch.ones(self.trie.vocab_size, dtype=torch.bool, device=device)  # (vocab,)
        if allowed == FINISHED:  # the row ended: it pads (transformers' finished rows take pad or EOS)
            mask[torch.tensor(self.tracker.eos_ids, dtype=torch.long).to(device)] = False
            mask[self.pad_id] = False
            return mask
        if allowed.node is not None:
            dense = self.trie.dense_allowed(allowed.node)
            if dense is not None:
                mask = ~dense.to(device)
            else:
                mask[self.trie.allowed(allowed.node).to(device)] = False
        if allowed.add:
            mask[torch.tensor(allowed.add, dtype=torch.long).to(device)] = False
        if allowed.drop:
            mask[torch.tensor(allowed.drop, dtype=torch.long).to(device)] = True
        return mask


class SchemaConstraint(LogitsProcessor):
    """Masks every token that would leave the schema trie (Eq. 6); one per batch.

    Args:
        tracker: the call's `KeyTracker` (trie, terminator, EOS, max_keys, distinct).
        prompt_length: padded prompt length of the batch (generated tokens follow it).
        pad_id: the padding token (allowed, with EOS, in rows that have finished).
        mask_rows: the call's mask rows (built for this batch alone if None).
        record_logprobs: record raw log-probs (one logsumexp per step).
        scores_are_logprobs: see `RawLogprobs`.
    """

    def __init__(self, tracker: KeyTracker, prompt_length: int, *, pad_id: int, mask_rows: MaskRows | None = None,
                 record_logprobs: bool = True, scores_are_logprobs: bool = False) -> None:
        if prompt_length < 0:
            raise ValueError(f"prompt_length must be >= 0, got {prompt_length}")
        self.tracker = tracker
        self.prompt_length = prompt_length
        self.pad_id = int(pad_id)
        self.mask_rows = mask_rows if mask_rows is not None else MaskRows(tracker, pad_id)
        self.logprobs = RawLogprobs(tracker.eos_ids, scores_are_logprobs) if record_logprobs else None
        self._pids: list[int] = []  # row -> prompt id in the tracker
        self._other_prompt: torch.Tensor | None = None  # (rows, rows) on the ids' device: rows of other prompts
        self._order1: torch.Tensor | None = None  # (rows,) row index + 1 on the ids' device
        self._shared: set[int] = set()  # rows whose prompt another row of the batch also has
        self._previous: torch.Tensor | None = None  # the previous step's generated ids, (rows, g - 1)
        self._states: list[RowState] = []  # the previous step's state per row
        self._prefixes: list[tuple[int, ...]] = []  # the previous step's generated prefix per row
        self.dead_rows = 0  # rows that left the trie (beam filler), counted

    def _parent_rows(self, generated: torch.Tensor) -> torch.Tensor:
        """(rows,) on the ids' device: the row that held each row's prefix without its last token at
        the previous step (beam search reorders rows), as the last such row of the same prompt,
        which is the row whose entry the tracker kept for that prefix; -1 where none did."""
        prev = self._previous  # (rows, g - 1) of the previous step
        differ = (generated[:, None, :-1] != prev[None, :, :]).any(-1) | self._other_prompt  # (rows, rows)
        return self._order1.masked_fill(differ, 0).amax(1) - 1  # (rows,): 1-based last match, less one

    def _fetch(self, fields: list[torch.Tensor], vocab: int) -> list[list[float]]:
        """The (rows,) tensors `fields` as host lists, in one device-to-host copy: stacked on the
        last one's device in float32 (token ids < 2^24 and row indices are exact in it)."""
        exact = torch.float32 if vocab < (1 << 24) else torch.float64
        device = fields[-1].device
        return torch.stack([f.to(device, exact) for f in fields]).tolist()  # (fields, rows)

    def _step_values(self, generated: torch.Tensor, scores: torch.Tensor):
        """Per row: the row holding its parent prefix at the previous step, its last token, the raw
        log-prob of that token and of EOS next. Beam search (log-prob scores) reorders rows: parents
        are matched on the device. Otherwise each row is assumed to extend its own prefix, which is
        checked on the device in the same copy; where it does not hold, or where rows of one prompt
        share a prefix (the tracker keeps the last such row's entry), parents are matched again and
        the token log-probs read again (a second copy, never in the harness's greedy or sampled calls)."""
        rows, vocab = scores.shape
        lp, last = self.logprobs, generated[:, -1]  # (rows,)
        beams = lp is not None and lp.scores_are_logprobs
        if beams:
            first = self._parent_rows(generated)  # (rows,)
        else:
            first = (generated[:, :-1] == self._previous).all(1)  # (rows,) each row holds its own prefix
        fields = [first, last] + ([lp.chosen(last, first if beams else None), lp.observe(scores)] if lp else [])
        fetched = self._fetch(fields, vocab)
        tokens = [int(t) for t in fetched[1]]
        raw, eos_lp = (fetched[2], fetched[3]) if lp else ([0.0] * rows, [0.0] * rows)
        if beams:
            parents = [int(p) for p in fetched[0]]
        elif all(fetched[0]):
            parents = [self.tracker.entries[(self._pids[r], self._prefixes[r])][1] if r in self._shared else r
                       for r in range(rows)]
        else:
            parents = [int(p) for p in self._fetch([self._parent_rows(generated)], vocab)[0]]
        if min(parents) < 0:
            row = parents.index(-1)
            raise KeyError(f"row {row}'s prefix {generated[row, :-1].tolist()} was not tracked at the previous step")
        if not beams and lp and parents != list(range(rows)):
            raw = self._fetch([lp.chosen(last, torch.tensor(parents), before=True)], vocab)[0]
        return parents, tokens, raw, eos_lp

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """One decoding step. Host work (issue 40, item 7): one device-to-host copy per step of what
        the tracker needs alone (`_step_values`), not the generated prefixes, which are kept on the
        host and grow by one token per step."""
        rows, vocab = scores.shape  # rows = batch * num_beams
        if vocab != self.tracker.trie.vocab_size:
            raise ValueError(f"scores have {vocab} columns but the schema trie was built for vocab_size="
                             f"{self.tracker.trie.vocab_size}")
        generated = input_ids[:, self.prompt_length:]  # (rows, g)
        g = generated.shape[1]
        if g == 0:
            self._pids = [self.tracker.prompt_id(prompt_key(row, self.pad_id))
                          for row in input_ids[:, :self.prompt_length].tolist()]  # (rows, prompt_length), once
            pids = torch.tensor(self._pids, dtype=torch.long).to(input_ids.device)  # (rows,)
            self._other_prompt = pids[:, None] != pids[None, :]  # (rows, rows)
            self._order1 = torch.arange(1, rows + 1, device=input_ids.device)  # (rows,) row index + 1
            self._shared = {r for r, pid in enumerate(self._pids) if self._pids.count(pid) > 1}
            eos_lp = self.logprobs.observe(scores).tolist() if self.logprobs is not None else [0.0] * rows
            states, prefixes, raw = [RowState(self.tracker.trie.ROOT)] * rows, [()] * rows, []
        else:
            parents, tokens, raw, eos_lp = self._step_values(generated, scores)
            states = [self.tracker.step(self._states[p], t, lp, g - 1) for p, t, lp in zip(parents, tokens, raw)]
            prefixes = [self._prefixes[p] + (t,) for p, t in zip(parents, tokens)]
        self._previous, self._states, self._prefixes = generated, states, prefixes
        self.tracker.remember(self._pids, prefixes, states, eos_lp, raw)
        self.dead_rows += sum(1 for s in states if s.node == DEAD)
        return scores.masked_fill(self.mask_rows.mask(states, scores.device), float("-inf"))
