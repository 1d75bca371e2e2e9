"""Reuse of the key/value states of shared prompt prefixes across `generate` calls.

Many calls of one run begin with the same long text: every full-context question starts with
the same transcript, every MemGPT step with the same system prompt and FIFO queue, every
ReadAgent look-up with the same gists. Prefill is what a CPU run spends its time on, so the
backend prefills such a prefix once, keeps its KV states here, and feeds only the suffixes.

A batch is laid out as ``[shared prefix | pads | row suffix]``: the prefix's states are
computed once (batch 1) and repeated over the rows, and the padding sits *between* prefix and
suffix, masked out, so every row still ends at the same column and generation is aligned.
Position ids come from the attention mask's cumulative sum (transformers' generate does
this), so a row's real tokens keep contiguous positions 0..n-1, exactly as without the cache.
The result equals a full prefill up to float rounding (other matmul shapes); tests compare
the two on a tiny model.

The cache holds a few prefixes (least recently used first out, bounded in entries and in
tokens) for one model; it never changes what is computed, only how often.
"""
from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    # Token lists of prompts run to thousands of ids, and a merged call compares many pairs:
    # compare blocks as list slices (in C), then the first differing block id by id.
    i, block = 0, 256
    while i < n and a[i:min(i + block, n)] == b[i:min(i + block, n)]:
        i += block
    i = min(i, n)
    while i < n and a[i] == b[i]:
        i += 1
    return i


def batch_prefix_length(rows: list[list[int]]) -> int:
    """Longest prefix shared by every row, leaving each row at least one token to feed."""
    shared = min(len(r) for r in rows) - 1
    for r in rows[1:]:
        shared = min(shared, common_prefix_length(rows[0], r))
    return max(0, shared)


def cache_keyword(model) -> str:
    """The name under which `model` takes KV states: `cache` (transformers >= 5.2x renamed it;
    the old name still works there, with a warning) or `past_key_values` (earlier 5.x, as on
    device images that lag behind the pin)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def layout_batch(rows: list[list[int]], shared: int, pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ids and attention mask, (batch, width), on `device`: rows left-padded, or, with a
    shared prefix of `shared` tokens, laid out as ``[prefix | pads | suffix]``.

    Built on the host and copied to the device once (two copies, not one per row).
    """
    width = shared + max(len(ids) - shared for ids in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (batch, width)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        input_ids[row, :shared] = torch.tensor(ids[:shared], dtype=torch.long)
        attention[row, :shared] = 1
        tail = ids[shared:]
        input_ids[row, width - len(tail):] = torch.tensor(tail, dtype=torch.long)
        attention[row, width - len(tail):] = 1
    return input_ids.to(device), attention.to(device)


@dataclass
class _Entry:
    ids: list[int]
    states: DynamicCache  # batch 1, exactly len(ids) positions; never handed out itself


class PrefixCache:
    """KV states of recently used prompt prefixes of one model.

    Args:
        model: the causal LM whose states are kept; None only counts the tokens a model would
            prefill (benches of call plans on the scripted LLM), keeping no states.
        min_tokens: a shared prefix shorter than this is not worth the copy; the batch is
            prefilled as usual.
        max_entries / max_tokens: bounds on what is kept (memory: tokens x layers x 2 x
            kv_heads x head_dim x dtype bytes; 46 KB per token for SmolLM2-135M in float32).
    """

    def __init__(self, model, min_tokens: int = 64, max_entries: int = 4, max_tokens: int = 16384) -> None:
        if min_tokens < 1 or max_entries < 1 or max_tokens < 1:
            raise ValueError("prefix cache bounds must be positive "
                             f"(min_tokens={min_tokens}, max_entries={max_entries}, max_tokens={max_tokens})")
        self.model = model
        self._keeps_logits = model is not None and "logits_to_keep" in inspect.signature(model.forward).parameters
        self.cache_keyword = None if model is None else cache_keyword(model)
        self.min_tokens = min_tokens
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self.entries: list[_Entry] = []  # most recently used last
        self.prefilled_tokens = 0  # prefix tokens computed here (the rest of a prefix was kept)

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()

    def reserve(self, entries: int) -> None:
        """Keep room for at least `entries` prefixes: a call merging N conversations has N, and
        the conversations' next call should find each of them. `max_tokens` still bounds memory."""
        self.max_entries = max(self.max_entries, entries)

    # ------------------------------------------------------------------ lookup
    def batch_states(self, rows: list[list[int]], repeat: bool = True) -> tuple[int, DynamicCache | None, int]:
        """For one batch: the length of the prefix all rows share (0 when shorter than
        `min_tokens`), its states repeated over the rows (batch 1 with `repeat=False`: a static
        cache copies them into its rows itself), and the prompt tokens they spare."""
        shared = batch_prefix_length(rows)
        if shared < self.min_tokens:
            return 0, None, 0
        computed = self.prefilled_tokens
        states = self.states_for(rows[0][:shared])
        if states is not None and len(rows) > 1 and repeat:
            states.batch_repeat_interleave(len(rows))
        return shared, states, len(rows) * shared - (self.prefilled_tokens - computed)

    def states_for(self, prefix: list[int]) -> DynamicCache:
        """A fresh DynamicCache (batch 1) holding exactly the states of `prefix`.

        Starts from the kept entry sharing the longest prefix with it, prefills the rest,
        and keeps the result for later calls.
        """
        best, best_len = None, 0
        for entry in self.entries:
            n = common_prefix_length(entry.ids, prefix)
            if n > best_len:
                best, best_len = entry, n
        if best is not None and best_len >= self.min_tokens:
            if best_len == len(best.ids) == len(prefix):
                self._touch(best)
                return copy.deepcopy(best.states)
            states = copy.deepcopy(best.states)
            if best_len < len(best.ids) and states is not None:
                states.crop(best_len - len(best.ids))  # negative: tokens to drop from the end
        else:
            states, best_len = (None if self.model is None else DynamicCache(config=self.model.config)), 0
        self._extend(states, prefix, best_len)
        self._keep(_Entry(list(prefix), states))
        return copy.deepcopy(states)

    @torch.inference_mode()
    def _extend(self, states: DynamicCache, prefix: list[int], start: int) -> None:
        """Prefill prefix[start:] on top of `states` (which hold prefix[:start])."""
        if start >= len(prefix):
            return
        self.prefilled_tokens += len(prefix) - start
        if self.model is None:
            return
        device = self.model.device
        ids = torch.tensor([prefix[start:]], dtype=torch.long, device=device)
        attention = torch.ones((1, len(prefix)), dtype=torch.long, device=device)
        positions = torch.arange(start, len(prefix), device=device)[None]
        # logits_to_keep=1: the prefix's logits are never used (a full 8K x 49K float matrix is 1.6 GB).
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}
        extra[self.cache_keyword] = states
        self.model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, **extra)

    # ------------------------------------------------------------------ bookkeeping
    def _touch(self, entry: _Entry) -> None:
        self.entries.remove(entry)
        self.entries.append(entry)

    def _keep(self, entry: _Entry) -> None:
        # A kept prefix of the new one is superseded by it (its states are a crop of the new ones).
        self.entries = [e for e in self.entries
                        if not (len(e.ids) <= len(entry.ids) and entry.ids[:len(e.ids)] == e.ids)]
        self.entries.append(entry)
        while len(self.entries) > self.max_entries or (
                len(self.entries) > 1 and sum(len(e.ids) for e in self.entries) > self.max_tokens):
            self.entries.pop(0)
        if len(entry.ids) > self.max_tokens:
            self.entries.remove(entry)
