"""Host time of one step of the schema constraint, today's against the reference (issue 40, item 7).

    BENCH_PARTS=constraint_host make bench        # a part of scripts/bench.py
    .venv/bin/python -m scripts.bench_constraint_step [--steps 24] [--reps 5]

On a GPU a decode step of a 1B model takes ~0.6 ms of device time, and the logits processors run on
the host between steps: whatever they do on the host (Python, kernel launches, waits for device
values) adds to the step. `ReferenceSchemaConstraint` is the processor as it was before issue 40:
it copied every row's whole generated prefix to the host, then its raw log-probs (two blocking
copies per step), and found each row's parent by the prefix. `SchemaConstraint` copies one small
tensor per step. Both replay the same recorded decode trace (same ids, same scores, same outputs,
checked) on a small vocabulary, so the vocabulary-wide kernels that a GPU runs asynchronously cost
next to nothing here and the time is host work: ms per step, median over the steps of `--reps`
replays, and the ratio after / before.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from collections import OrderedDict

import torch

from scgmem.core.schema import TokenTrie
from scgmem.llm.key_rule import DEAD, RowState
from scgmem.llm.local.key_tracker import KeyTracker, prompt_key
from scgmem.llm.local.schema_processor import MaskRows, RawLogprobs, SchemaConstraint


def reference_remember(tracker, pids, generated, states, eos_logprobs, token_logprobs) -> None:
    """`KeyTracker.remember` before issue 40: one Python iteration per row."""
    for row, (pid, prefix, state) in enumerate(zip(pids, generated, states)):
        key = (pid, tuple(prefix))
        tracker.entries[key] = (state, row, eos_logprobs[row])
        if token_logprobs is not None and prefix:
            tracker.token_lp[key] = token_logprobs[row]


class ReferenceRawLogprobs(RawLogprobs):
    """`RawLogprobs` before issue 40: a logsumexp over the EOS ids even when there is one, and a
    zero logsumexp subtracted from log-prob scores."""

    def chosen(self, last, parent_rows):
        last = last.to(self._scores.device)
        if parent_rows == list(range(len(parent_rows))):
            return self._scores.gather(1, last[:, None]).squeeze(1).float() - self._lse
        prev_rows = torch.tensor(parent_rows, dtype=torch.long).to(self._scores.device)
        return self._scores[prev_rows, last].float() - self._lse[prev_rows]

    def observe(self, scores):
        self._scores = scores
        if self.scores_are_logprobs:
            self._lse = torch.zeros(scores.shape[0], device=scores.device)
        else:
            self._lse = torch.logsumexp(scores.float(), dim=-1)
        if self.eos.device != scores.device:
            self.eos = self.eos.to(scores.device)
        return torch.logsumexp(scores[:, self.eos].float(), dim=-1) - self._lse


class ReferenceMaskRows(MaskRows):
    """`MaskRows.mask` before issue 40: each row's situation worked out, even for a state object
    an earlier row of the step already had."""

    def mask(self, states, device):
        if self._device != device:
            self._device, self._rows = device, OrderedDict()
        rows = []
        for state in states:
            situation = self.situation(state)
            row = self._rows.get(situation)
            if row is None:
                row = self._rows[situation] = self._build(situation)
                if len(self._rows) > self.capacity:
                    self._rows.popitem(last=False)
            else:
                self._rows.move_to_end(situation)
            rows.append(row)
        return torch.stack(rows)


class ReferenceSchemaConstraint(SchemaConstraint):
    """The constraint's step before issue 40 (two blocking copies, parents found by prefix)."""

    def __init__(self, tracker, prompt_length, *, pad_id, scores_are_logprobs=False, **kw) -> None:
        super().__init__(tracker, prompt_length, pad_id=pad_id, scores_are_logprobs=scores_are_logprobs,
                         mask_rows=ReferenceMaskRows(tracker, pad_id))
        self.logprobs = ReferenceRawLogprobs(tracker.eos_ids, scores_are_logprobs)

    def _raw_logprobs(self, generated, parent_rows, scores):
        rows = scores.shape[0]
        if self.logprobs is None:
            return [0.0] * rows, [0.0] * rows
        chosen = None if parent_rows is None else self.logprobs.chosen(generated[:, -1], parent_rows)
        eos = self.logprobs.observe(scores)
        fetched = torch.cat([eos] if chosen is None else [chosen, eos]).tolist()
        return fetched[:-rows], fetched[-rows:]

    def __call__(self, input_ids, scores):
        rows, _ = scores.shape
        generated = input_ids[:, self.prompt_length:]
        gen = generated.tolist()
        if generated.shape[1] == 0:
            self._pids = [self.tracker.prompt_id(prompt_key(row, self.pad_id))
                          for row in input_ids[:, :self.prompt_length].tolist()]
            parents = None
        else:
            parents = self.tracker.parents(self._pids, gen)
        raw, eos_lp = self._raw_logprobs(generated, None if parents is None else [p[1] for p in parents], scores)
        if parents is None:
            states = [RowState(TokenTrie.ROOT)] * rows
        else:
            position = len(gen[0]) - 1
            states = [self.tracker.step(p[0], row[-1], lp, position) for p, row, lp in zip(parents, gen, raw)]
        reference_remember(self.tracker, self._pids, gen, states, eos_lp, raw)
        self.dead_rows += sum(1 for s in states if s.node == DEAD)
        return scores.masked_fill(self.mask_rows.mask(states, scores.device), float("-inf"))


def random_trie(vocab: int, keys: int, seed: int = 0) -> tuple[TokenTrie, int, int, int]:
    """A trie of `keys` keys of 1-4 tokens (terminator, pad, EOS are the last three ids)."""
    term, pad, eos = vocab - 3, vocab - 2, vocab - 1
    gen = torch.Generator().manual_seed(seed)
    trie = TokenTrie(vocab)
    for _ in range(keys):
        n = int(torch.randint(1, 5, (1,), generator=gen))
        trie.insert(torch.randint(0, term, (n,), generator=gen).tolist() + [term])
    return trie, term, pad, eos


def record_trace(trie, term, pad, eos, prompts: int, beams: int, steps: int, seed: int = 1) -> list:
    """(input_ids, scores) of every step of a decoding under the constraint: `prompts` prompts x
    `beams` rows, beam rows reordered within their prompt each step (as beam search does)."""
    gen = torch.Generator().manual_seed(seed)
    rows, vocab = prompts * beams, trie.vocab_size
    tracker = KeyTracker(trie, terminator=term, eos_ids=[eos], max_keys=8)
    proc = SchemaConstraint(tracker, 8, pad_id=pad, scores_are_logprobs=beams > 1)
    ids = torch.randint(0, term, (prompts, 8), generator=gen).repeat_interleave(beams, 0)  # (rows, 8)
    trace = []
    for _ in range(steps):
        scores = torch.randn(rows, vocab, generator=gen)
        if beams > 1:
            scores = torch.log_softmax(scores, -1)
        trace.append((ids, scores))
        masked = proc(ids, scores.clone())
        nxt = (masked + 3 * torch.rand(rows, vocab, generator=gen)).argmax(-1)  # an allowed token per row
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        if beams > 1:
            ids = ids[(torch.arange(rows) // beams) * beams + torch.randint(0, beams, (rows,), generator=gen)]
    return trace


def replay(cls, trie, term, pad, eos, trace, beams: int) -> tuple[list[float], list[torch.Tensor], KeyTracker]:
    """Seconds of each step of a fresh `cls` processor over `trace`, its outputs and its tracker."""
    tracker = KeyTracker(trie, terminator=term, eos_ids=[eos], max_keys=8)
    proc = cls(tracker, 8, pad_id=pad, scores_are_logprobs=beams > 1)
    seconds, outs = [], []
    for ids, scores in trace:
        start = time.perf_counter()
        outs.append(proc(ids, scores))
        seconds.append(time.perf_counter() - start)
    return seconds, outs, tracker


def bench_constraint_host(steps: int = 24, reps: int = 5, vocab: int = 512) -> dict:
    """Host ms per step, reference vs today's, greedy at 16 rows and beam search at 4 x 5 rows."""
    torch.set_num_threads(1)
    trie, term, pad, eos = random_trie(vocab, 2000)
    out = {"vocab": vocab, "steps": steps, "reps": reps}
    for name, prompts, beams in (("greedy_16_rows", 16, 1), ("beams_20_rows", 4, 5)):
        trace = record_trace(trie, term, pad, eos, prompts, beams, steps)
        times = {"before": [], "after": []}
        for _ in range(reps):
            for key, cls in (("before", ReferenceSchemaConstraint), ("after", SchemaConstraint)):
                seconds, outs, tracker = replay(cls, trie, term, pad, eos, trace, beams)
                times[key] += seconds[1:]  # the first step builds the mask rows of a new call
                if key == "before":
                    ref_outs, ref_entries = outs, tracker.entries
                else:
                    assert all(torch.equal(a, b) for a, b in zip(outs, ref_outs)), f"{name}: masks differ"
                    assert tracker.entries == ref_entries, f"{name}: tracked states differ"
        before, after = (1000 * statistics.median(times[k]) for k in ("before", "after"))
        copies = {key: copies_per_step(cls, trie, term, pad, eos, trace, beams)
                  for key, cls in (("before", ReferenceSchemaConstraint), ("after", SchemaConstraint))}
        out[name] = {"before_ms": round(before, 4), "after_ms": round(after, 4), "ratio": round(after / before, 3),
                     "host_copies_per_step": copies}
    return out


def copies_per_step(cls, trie, term, pad, eos, trace, beams: int) -> float:
    """Device-to-host copies (`tolist` calls; each waits for the device on a GPU) per step after the first."""
    real, count = torch.Tensor.tolist, [0]

    def counted(self):
        count[0] += 1
        return real(self)

    torch.Tensor.tolist = counted
    try:
        tracker = KeyTracker(trie, terminator=term, eos_ids=[eos], max_keys=8)
        proc = cls(tracker, 8, pad_id=pad, scores_are_logprobs=beams > 1)
        proc(*trace[0])
        count[0] = 0
        for ids, scores in trace[1:]:
            proc(ids, scores)
    finally:
        torch.Tensor.tolist = real
    return round(count[0] / (len(trace) - 1), 2)


def report_rows(result: dict) -> list[tuple[str, float, str]]:
    rows = []
    for name in ("greedy_16_rows", "beams_20_rows"):
        cell = result[name]
        rows += [(f"constraint host ms/step {name}, before", cell["before_ms"], ""),
                 ("  after (issue 40)", cell["after_ms"], ""),
                 ("  ratio after / before", cell["ratio"], "< 1"),
                 ("  host copies per step, before", cell["host_copies_per_step"]["before"], ""),
                 ("  host copies per step, after", cell["host_copies_per_step"]["after"], "1")]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(bench_constraint_host(args.steps, args.reps), indent=1))


if __name__ == "__main__":
    main()
