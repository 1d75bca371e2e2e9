"""How one `generate` call's prompts are split into forward batches.

Prompts are sorted by length, so that a batch pads little, and cut into batches of at most
`batch_size` rows and `max_batch_tokens` padded tokens.

With the prefix cache on, rows that share a long prefix are also kept together. A call that
merges several conversations' requests (`scgmem.llm.scheduler`) holds, say, the full-context
questions of three conversations: each conversation's questions share its whole transcript,
while all rows share only the chat template and the instruction. Sorted by length alone, the
conversations interleave, no batch shares more than the template, and every row prefills its
transcript again. Grouped, each transcript is prefilled once, as when the conversations run
one after another.

The rule, a function of the token ids alone (so reruns form the same batches):

1. The *call prefix* is the prefix every row shares. It is shared by any batch anyway.
2. In length order, a row joins the first group whose first row shares with it at least
   `min_tokens` more than the call prefix; otherwise it opens a group. (Two groups' first rows
   share less than that, so a row can fit only one group.)
3. Groups follow each other in the order of their first rows, rows within a group by length.
4. A group *stays apart* (never shares a batch with another group's rows) when it has two
   or more rows, or when the prefix cache keeps a prefix its row shares to the same depth (a
   question of a conversation whose transcript an earlier call prefilled). Mixed, the batch's
   shared prefix would fall back to the call prefix, and the group's prefix would be
   prefilled again for each row. Other lone rows gain nothing apart, so they pack together
   as before.

When every row is alone and uncached, or all rows form one group (one conversation's call, as
at `run.parallel_conversations=1`), the batches are exactly the length-sorted ones.
"""
from __future__ import annotations

from typing import Callable, Sequence

from scgmem.llm.local.prefix_cache import PrefixCache, common_prefix_length


def call_prefix_length(rows: Sequence[list[int]], order: list[int]) -> int:
    """Tokens every row of `order` shares (step 1 above)."""
    first = rows[order[0]]
    return min((common_prefix_length(first, rows[i]) for i in order[1:]), default=len(first))


def prefix_groups(rows: Sequence[list[int]], order: list[int], min_tokens: int) -> list[list[int]]:
    """Indices of `order` (rows sorted by length) grouped by a prefix of at least `min_tokens`
    tokens beyond the prefix all of them share (steps 1-3 above)."""
    if len(order) < 2:
        return [list(order)]
    call_prefix = call_prefix_length(rows, order)
    groups: list[list[int]] = []
    for i in order:
        for group in groups:
            if common_prefix_length(rows[group[0]], rows[i]) >= call_prefix + min_tokens:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def groups_apart(groups: list[list[int]], rows: Sequence[list[int]], order: list[int], min_tokens: int,
                 kept: Sequence[list[int]]) -> list[bool]:
    """Which groups stay apart (step 4 above); `kept` are the prefixes the cache holds."""
    call_prefix = call_prefix_length(rows, order)
    return [len(g) > 1 or any(common_prefix_length(k, rows[g[0]]) >= call_prefix + min_tokens for k in kept)
            for g in groups]


def plan_batches(groups: list[list[int]], est_tokens: Sequence[int], batch_size: int,
                 max_batch_tokens: int, apart: Sequence[bool] | None = None,
                 cost: Callable[[int, int], int] | None = None) -> list[list[int]]:
    """Cut the grouped rows into batches of at most `batch_size` rows and `max_batch_tokens`
    padded tokens (`cost(rows, longest row's est_tokens)`, default their product; a static KV
    cache pads both, `scgmem.llm.local.static_decode.padded_tokens`), never mixing a group that stays
    apart (`apart`; by default the groups of two or more rows) with another group."""
    apart = [len(g) > 1 for g in groups] if apart is None else apart
    cost = cost or (lambda rows, tokens: rows * tokens)
    batches: list[list[int]] = []
    current: list[int] = []
    current_group, longest = -1, 0
    for g, group in enumerate(groups):
        for i in group:
            cut_here = current_group != g and (apart[g] or apart[current_group])
            width = max(longest, est_tokens[i])
            if current and (cut_here or len(current) + 1 > batch_size or cost(len(current) + 1, width) > max_batch_tokens):
                batches.append(current)
                current, width = [], est_tokens[i]
            current.append(i)
            current_group, longest = g, width
    if current:
        batches.append(current)
    return batches


def split_call(prompts: Sequence[str], rows: dict[int, list[int]], max_new_tokens: int, batch_size: int,
               max_batch_tokens: int, cache: PrefixCache | None,
               cost: Callable[[int, int], int] | None = None) -> list[list[int]]:
    """One `generate` call's batches: `rows` maps prompt index -> token ids (the prompts still to
    compute). Sorted by length (ties by index), grouped by prefix when `cache` serves the call; a
    function of the prompts alone, so reruns form the same batches. The padded-token estimate
    is character based (~3 characters a token in English) plus `max_new_tokens`; `cost` as in
    `plan_batches`."""
    order = sorted(rows, key=lambda i: (len(prompts[i]), i))
    groups, apart = [order], [False]
    if cache is not None and len(order) > 1:
        groups = prefix_groups(rows, order, cache.min_tokens)
        apart = groups_apart(groups, rows, order, cache.min_tokens, [e.ids for e in cache.entries])
        # Room for each group's prefix and the longer one its batch may add beside it, so the
        # next call of these conversations still finds every prefix, whatever their order.
        cache.reserve(2 * sum(apart))
    est = {i: len(prompts[i]) // 3 + max_new_tokens for i in rows}
    return plan_batches(groups, est, batch_size, max_batch_tokens, apart, cost)


class PrefillCounter:
    """Prompt tokens a model with the prefix cache would prefill for a run's `generate` calls,
    fed in order, split as `LLM.generate` splits them: the machine-independent measure of the
    cache (memo hits are not modelled; beam-search calls never use the cache).
    `group_prefixes=False` counts the plain length-sorted batches, for comparison."""

    def __init__(self, *, batch_size: int, max_batch_tokens: int, min_tokens: int = 64, cache_tokens: int = 16384,
                 group_prefixes: bool = True) -> None:
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        self.cache = PrefixCache(None, min_tokens=min_tokens, max_tokens=cache_tokens)
        self.group_prefixes = group_prefixes
        self.prompt_tokens = self.prefilled_tokens = 0

    def add(self, prompts: Sequence[str], rows: Sequence[list[int]], max_new_tokens: int = 64,
            num_beams: int = 1) -> None:
        """One call: its prompts and their token ids."""
        serves = num_beams <= 1
        planner = self.cache if serves and self.group_prefixes else None
        by_index = dict(enumerate(rows))
        for batch in split_call(prompts, by_index, max_new_tokens, self.batch_size, self.max_batch_tokens, planner):
            ids = [by_index[i] for i in batch]
            spared = self.cache.batch_states(ids)[2] if serves else 0
            self.prompt_tokens += sum(map(len, ids))
            self.prefilled_tokens += sum(map(len, ids)) - spared

    def report(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "prefilled_tokens": self.prefilled_tokens}
