"""A constrained SCG-Mem step on a device: ms per decode step with the schema constraint against
the same call without it, and the constraint's own host time per step (issue 40, item 10).

Used by scripts/device_throughput.py (`--constrained`), on the random-weight paper shapes of
scripts/device_check.py. A schema of `concepts` LoCoMo word n-grams (the tokenizer the check trained)
constrains greedy key generation of `rows` prompts (ingest's shape) and beam search of `beam_prompts`
x `beams` rows (recall's). EOS is suppressed in the unconstrained call and the constrained one runs
`max_keys` keys, so both decode about the same number of steps; ms per step = wall / steps.
The processor's own time is measured around its call (device-synchronised), which on a GPU is the
host work the step adds (scripts/bench_constraint_step.py measures the same on the CPU).
"""
from __future__ import annotations

import time

import torch

from scripts.bench_inputs import word_grams


class _Timed:
    """A logits processor wrapped to record its wall time per call (synchronised on the device)."""

    def __init__(self, inner, sink: list[float], sync) -> None:
        self.inner, self.sink, self.sync = inner, sink, sync

    def __call__(self, input_ids, scores):
        self.sync()
        start = time.perf_counter()
        out = self.inner(input_ids, scores)
        self.sync()
        self.sink.append(time.perf_counter() - start)
        return out


def measure_constrained(llm, corpus: list[str], sync, *, rows: int = 16, beam_prompts: int = 4, beams: int = 5,
                        concepts: int = 1000, max_keys: int = 4) -> dict:
    """{"greedy": ..., "beam": ...}: ms per step constrained / unconstrained and processor ms per step."""
    from transformers import SuppressTokensLogitsProcessor

    from scgmem.core.decoding import generate_keys
    from scgmem.llm.local.constraint import LocalKeyConstraint
    from scgmem.core.schema import CognitiveSchema

    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    for concept in word_grams(corpus, concepts):
        try:
            schema.add(concept)
        except ValueError:  # a concept the schema refuses (e.g. one that spells a forbidden id)
            pass
    prompts = [llm.render(f"Extract the keywords of this message, separated by commas.\n\nMessage: {line}",
                          assistant_prefix="Keywords:") for line in corpus[:max(rows, beam_prompts)]]
    out = {"concepts": len(schema), "trie_nodes": schema.trie.num_nodes}
    for name, batch, width in (("greedy", rows, 1), ("beam", beam_prompts, beams)):
        times: list[float] = []
        real_call = LocalKeyConstraint.__call__

        def timed_factory(self, prompt_length, n_rows, _real=real_call):
            return [_Timed(p, times, sync) for p in _real(self, prompt_length, n_rows)]

        LocalKeyConstraint.__call__ = timed_factory
        try:
            generate_keys(llm, schema, prompts[:batch], max_keys=max_keys, num_beams=width)  # warm-up
            times.clear()
            sync()
            start = time.perf_counter()
            generate_keys(llm, schema, prompts[:batch], max_keys=max_keys, num_beams=width)
            sync()
            constrained_s, steps = time.perf_counter() - start, max(1, len(times))
        finally:
            LocalKeyConstraint.__call__ = real_call

        def no_eos(width_, rows_):
            return [SuppressTokensLogitsProcessor(llm.eos_token_ids, device=llm.device)]

        sync()
        start = time.perf_counter()
        llm.generate(prompts[:batch], max_new_tokens=steps, processors=no_eos, num_beams=width,
                     num_return_sequences=width, length_penalty=0.0)
        sync()
        free_s = time.perf_counter() - start
        out[name] = {"rows": batch * width, "steps": steps,
                     "constrained_ms_per_step": round(1000 * constrained_s / steps, 3),
                     "unconstrained_ms_per_step": round(1000 * free_s / steps, 3),
                     "ratio": round(constrained_s / free_s, 3) if free_s else None,
                     "processor_ms_per_step": round(1000 * sum(times) / steps, 3)}
        print(f"[constrained] {name}: {out[name]}", flush=True)
    return out
