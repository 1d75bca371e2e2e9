"""The schema constraint against a brute-force reference: at every step of random decoding
(rows reordered as beam search does, masked tokens sometimes forced as beam fillers are),
each row's allowed tokens are exactly those the rules of Section 3.3 give when read off
the list of keys, and each recorded key's raw log-prob is the sum of its tokens'."""
from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scgmem.llm.local.schema_processor import MaskRows, SchemaConstraint
from scgmem.llm.local.key_tracker import KeyTracker
from tests.core.test_decoding import build, schemas, special


def reference_allowed(keys: set[tuple[int, ...]], generated: list[int], vocab: int, max_keys, distinct) -> set[int]:
    """Allowed next tokens, from the key list alone: a row writes keys of S (distinct ones when
    `distinct`), ends the list with EOS where a key may end, and only EOS or pad follow an
    EOS or a token the rules did not allow."""
    term, pad, eos = special(vocab)
    finished = {eos, pad}
    written: list[tuple[int, ...]] = []
    current: list[int] = []
    for t in generated:
        if t not in reference_allowed_live(keys, written, current, vocab, max_keys, distinct):
            return finished  # it left the trie
        if t == eos:
            return finished
        current.append(t)
        if t == term:
            written.append(tuple(current))
            current = []
    return reference_allowed_live(keys, written, current, vocab, max_keys, distinct)


def reference_allowed_live(keys, written, current, vocab, max_keys, distinct) -> set[int]:
    term, _, eos = special(vocab)
    open_keys = [k for k in keys if not (distinct and k in written)]
    n = len(current)
    allowed = {k[n] for k in open_keys if list(k[:n]) == current}
    last = max_keys is not None and len(written) + 1 >= max_keys
    if last:
        allowed.discard(term)
    if tuple(current) + (term,) in open_keys:
        allowed.add(eos)  # EOS ends the key as the terminator would
    if distinct and not current and written and not open_keys:
        allowed = {eos}  # every key of S is in the list
    return allowed


@settings(max_examples=300, deadline=None)
@given(data=schemas(), seed=st.integers(0, 2**31), max_keys=st.sampled_from([1, 2, 3, None]),
       distinct=st.booleans(), reorder=st.booleans(), logprob_scores=st.booleans(),
       cached_rows=st.sampled_from([1, 3, None]))
def test_masks_and_raw_logprobs_match_the_reference(data, seed, max_keys, distinct, reorder, logprob_scores,
                                                    cached_rows):
    vocab, keys = data
    trie, _ = build(vocab, keys, dense_threshold=3)  # dense and sparse nodes both occur
    term, pad, eos = special(vocab)
    key_set = {tuple(k) for k in keys}
    gen = torch.Generator().manual_seed(seed)
    rows, prompt_len = 4, 2
    tracker = KeyTracker(trie, terminator=term, eos_ids=[eos], max_keys=max_keys, distinct=distinct)
    # a small cache drops rows within a step and builds them again
    mask_rows = MaskRows(tracker, pad) if cached_rows is None else MaskRows(tracker, pad, max_bytes=cached_rows * vocab)
    proc = SchemaConstraint(tracker, prompt_len, pad_id=pad, mask_rows=mask_rows, scores_are_logprobs=logprob_scores)
    ids = torch.randint(0, term, (1, prompt_len), generator=gen).repeat(rows, 1)  # one prompt's beams
    model: dict[tuple[int, ...], torch.Tensor] = {}  # prompt + prefix -> the next token's logits
    token_logprobs: dict[tuple[int, ...], float] = {}  # generated prefix -> raw log-prob of its last token
    for _ in range(3 * trie.max_depth + 2):
        # a model's scores are a function of the prefix: rows holding the same prefix get the same
        for row in map(tuple, ids.tolist()):
            if row not in model:
                model[row] = torch.randn(vocab, generator=gen) * 3
        logits = torch.stack([model[row] for row in map(tuple, ids.tolist())])  # (rows, vocab)
        if logprob_scores:
            logits = torch.log_softmax(logits, -1)
        masked = proc(ids, logits.clone())
        raw = torch.log_softmax(logits.double(), -1)  # (rows, vocab)
        choices = []
        for r, row in enumerate(ids[:, prompt_len:].tolist()):
            allowed = sorted(reference_allowed(key_set, row, vocab, max_keys, distinct))
            assert torch.isfinite(masked[r]).nonzero().flatten().tolist() == allowed, row
            forced = int(torch.randint(0, 10, (1,), generator=gen)) == 0  # a filler: any token
            pick = int(torch.randint(0, vocab if forced else len(allowed), (1,), generator=gen))
            choices.append(pick if forced else allowed[pick])
            token_logprobs[tuple(row) + (choices[-1],)] = float(raw[r, choices[-1]])
        ids = torch.cat([ids, torch.tensor(choices)[:, None]], dim=1)
        if reorder:  # beam search hands each row another row's prefix
            ids = ids[torch.randint(0, rows, (rows,), generator=gen)]
    proc(ids, torch.zeros(rows, vocab))  # the last token's state
    for row in ids[:, prompt_len:].tolist():
        state, _, _ = proc.tracker.entries[(0, tuple(row))]
        for start, end, logprob in state.keys:
            expected = sum(token_logprobs[tuple(row[:i + 1])] for i in range(start, end))
            assert math.isclose(logprob, expected, abs_tol=1e-4), (row, start, end)
