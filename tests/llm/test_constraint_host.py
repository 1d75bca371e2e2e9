"""The schema constraint's host work per decode step (issue 40, item 7): one device-to-host copy
per step, and the same masks, states and recorded log-probs as the processor before the change
(scripts/bench_constraint_step.py keeps it as the reference, and times both)."""
from __future__ import annotations

import pytest
import torch

from scgmem.llm.local.schema_processor import SchemaConstraint
from scgmem.llm.local.key_tracker import KeyTracker
from scripts.bench_constraint_step import ReferenceSchemaConstraint, random_trie, record_trace, replay

TRIE = random_trie(64, 60)


@pytest.mark.parametrize("prompts,beams", [(6, 1), (2, 4), (1, 3)])
def test_same_masks_states_and_logprobs_as_the_reference(prompts, beams):
    trie, term, pad, eos = TRIE
    trace = record_trace(trie, term, pad, eos, prompts, beams, steps=12, seed=prompts + beams)
    _, ref_outs, ref = replay(ReferenceSchemaConstraint, trie, term, pad, eos, trace, beams)
    _, outs, new = replay(SchemaConstraint, trie, term, pad, eos, trace, beams)
    assert all(torch.equal(a, b) for a, b in zip(outs, ref_outs))
    assert new.entries == ref.entries and getattr(new, "token_lp", None) == getattr(ref, "token_lp", None)


def test_duplicate_prompts_and_rows_that_move_read_the_trackers_parent():
    """Greedy rows are assumed to extend their own prefix; rows of one prompt sharing a prefix, or
    rows that moved, take the parent the tracker kept (the last row holding the prefix)."""
    trie, term, pad, eos = TRIE
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, term, (2, 4), generator=gen).repeat(2, 1)  # rows 0/2 and 1/3: one prompt each
    procs = {cls: cls(KeyTracker(trie, terminator=term, eos_ids=[eos], max_keys=3), 4, pad_id=pad)
             for cls in (ReferenceSchemaConstraint, SchemaConstraint)}
    for step in range(6):
        scores = torch.randn(4, trie.vocab_size, generator=gen)
        outs = [proc(ids, scores.clone()) for proc in procs.values()]
        assert torch.equal(*outs), step
        ids = torch.cat([ids, outs[0].argmax(-1)[:, None]], dim=1)
        if step == 2:
            ids = ids[[2, 1, 0, 3]]  # rows move without log-prob scores: matched again
    ref, new = (p.tracker for p in procs.values())
    assert new.entries == ref.entries and getattr(new, "token_lp", None) == getattr(ref, "token_lp", None)


@pytest.mark.parametrize("beams", [1, 4])
def test_one_host_copy_per_step(beams, monkeypatch):
    trie, term, pad, eos = TRIE
    trace = record_trace(trie, term, pad, eos, 4, beams, steps=8)
    copies = []
    real = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: copies.append(1) or real(self))
    tracker = KeyTracker(trie, terminator=term, eos_ids=[eos], max_keys=8)
    proc = SchemaConstraint(tracker, 8, pad_id=pad, scores_are_logprobs=beams > 1)
    for step, (ids, scores) in enumerate(trace):
        copies.clear()
        proc(ids, scores)
        assert len(copies) == (2 if step == 0 else 1), (step, len(copies))  # step 0 also reads the prompts


def test_counter_noise_is_one_batched_computation_per_step():
    """CUDA's sampling noise: the same number of kernels whatever the rows, and each row's noise a
    function of its own seed and the step (not of the batch)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from scgmem.llm.local.sampling import SeededGumbelSampler

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    counts, rows_out = [], {}
    for rows in (2, 16):
        sampler = SeededGumbelSampler(list(range(7, 7 + rows)), temperature=0.7, prompt_length=3, noise="counter")
        scores, ids = torch.zeros(rows, 50), torch.zeros(rows, 4, dtype=torch.long)
        sampler(ids, scores)  # the seeds go to the device once, at the first step
        with Count() as count:
            rows_out[rows] = sampler(ids, scores)
        counts.append(count.ops)
    assert counts[0] == counts[1], counts
    torch.testing.assert_close(rows_out[2], rows_out[16][:2], rtol=0, atol=0)
    generator = SeededGumbelSampler([7, 8], temperature=0.7, prompt_length=3, noise="generator")
    assert generator(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 50)).shape == (2, 50)


def test_counter_noise_samples_the_softmax():
    from scgmem.llm.local.sampling import SeededGumbelSampler

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    picks = torch.zeros(4)
    for seed in range(4000):
        sampler = SeededGumbelSampler([seed], temperature=1.0, prompt_length=0, noise="counter")
        picks[int(sampler(torch.zeros(1, 0, dtype=torch.long), logits).argmax())] += 1
    torch.testing.assert_close(picks / picks.sum(), torch.softmax(logits[0], -1), atol=0.03, rtol=0)
