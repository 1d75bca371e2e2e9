"""Small pieces of the local backend's bookkeeping around `generate`: answering plain calls from
its memo, and cutting a generated row at its first end-of-sequence id."""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Sequence

from scgmem.llm.usage import UsageMeter


def recall_memo(memo: OrderedDict, usage: UsageMeter, keys: list, results: list) -> None:
    """Fill `results` from the memo. A hit is counted as the call it stands for (a method's
    cost does not depend on what an earlier sweep job computed) and as a memo hit."""
    hits = []
    for i, key in enumerate(keys):
        if key in memo:
            memo.move_to_end(key)
            results[i] = [dataclasses.replace(g, token_ids=list(g.token_ids)) for g in memo[key]]
            hits.append(results[i])
    if hits:
        usage.add(prompt_tokens=sum(g[0].n_prompt_tokens for g in hits),
                  generated_tokens=sum(len(x.token_ids) for g in hits for x in g),
                  calls=len(hits), memo_hits=len(hits), cut=sum(x.cut for g in hits for x in g))


def cut_at_eos(ids: list[int], pad: int, eos_ids: Sequence[int]) -> tuple[list[int], bool]:
    """The generated ids before the first EOS (pads dropped), and whether an EOS came."""
    kept = []
    for t in ids:
        if t in eos_ids:
            return kept, True
        if t == pad and pad not in eos_ids:
            continue
        kept.append(t)
    return kept, False
