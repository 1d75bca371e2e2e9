"""Bench part `constrained_step`: the decode step under the schema constraint against a free step,
same model, prompts and batch, for schemas of 100 .. 20,000 concepts (the paper's cost claim:
constraining costs about a free step).

    BENCH_PARTS=constrained_step make bench

The constraint is compiled as SCG-Mem's own calls compile it (`LLM.generate(constraint=...)`): a
`KeyConstraint` over the schema's trie, ending on `key_end_id`, turned into the local backend's
processor factory `LocalKeyConstraint`. The bench passes that factory as `processors=` itself, so
that it can time the processor apart from the step (`TimedProcessor`); the free calls carry only
the step timer, so both sides run the same float32 score head.
"""
from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

from transformers import LogitsProcessor

from scripts.bench_inputs import Scale, concept_pool

PROMPTS = ["I went hiking with my kids last weekend.", "Caroline joined the LGBTQ support group.",
           "We painted a sunrise by the lake.", "My new job at the coffee shop starts Monday.",
           "The charity race raised money for mental health.", "I read a book about adoption.",
           "Melanie's pottery class was fun.", "We went camping in the mountains."]


class StepTimer(LogitsProcessor):
    """Records the wall time between consecutive decode steps (forward + every processor)."""

    def __init__(self, sink: list[float]) -> None:
        self.sink = sink
        self.last: float | None = None

    def __call__(self, input_ids, scores):
        now = time.perf_counter()
        if self.last is not None:
            self.sink.append(now - self.last)
        self.last = now
        return scores


class TimedProcessor(LogitsProcessor):
    """Runs `inner` and records how long it took: the mask's own cost, free of step-to-step noise."""

    def __init__(self, inner, sink: list[float]) -> None:
        self.inner, self.sink = inner, sink

    def __call__(self, input_ids, scores):
        t0 = time.perf_counter()
        out = self.inner(input_ids, scores)
        self.sink.append(time.perf_counter() - t0)
        return out


def step_times(llm, prompts, processors, min_steps: int) -> list[float]:
    """Seconds of each decode step of repeated `generate` calls, until `min_steps` are timed."""
    times: list[float] = []
    while len(times) < min_steps:
        def factory(width, rows):
            return [*(processors(width, rows) if processors else []), StepTimer(times)]
        before = len(times)
        llm.generate(prompts, max_new_tokens=32, processors=factory)
        if len(times) == before:
            break
    return times


def schema_constraint(llm, schema):
    """The processor factory SCG-Mem's constrained calls get (`LLM.generate(constraint=...)`)."""
    from scgmem.core.decoding import key_end_id
    from scgmem.llm.constraint_spec import KeyConstraint
    from scgmem.llm.local.constraint import LocalKeyConstraint

    constraint = KeyConstraint(schema.trie, terminator=schema.terminator, end_id=key_end_id(llm), max_keys=None)
    return LocalKeyConstraint(constraint, pad_id=llm.tokenizer.pad_token_id, beams=False)


def call_median(llm, prompts, processors) -> float:
    """The median decode-step seconds of one `generate` call (32 new tokens at most)."""
    times: list[float] = []

    def factory(width, rows):
        return [*(processors(width, rows) if processors else []), StepTimer(times)]
    llm.generate(prompts, max_new_tokens=32, processors=factory)
    return statistics.median(times) if times else float("nan")


def paired_ratio(pairs: list[tuple[float, float]], draws: int = 2000, seed: int = 0) -> dict:
    """median(constrained) / median(free) over interleaved (constrained, free) call pairs, with a
    percentile bootstrap 95% CI over the pairs (resampled whole, so drift shared by a pair cancels)."""
    rand = random.Random(seed)

    def ratio(sample):
        return statistics.median(c for c, _ in sample) / statistics.median(f for _, f in sample)
    boots = sorted(ratio([rand.choice(pairs) for _ in pairs]) for _ in range(draws))
    return {"ratio": ratio(pairs), "ci95": [boots[int(0.025 * draws)], boots[int(0.975 * draws) - 1]],
            "pairs": len(pairs)}


def bench_constrained_step(llm, scale: Scale = Scale("full")) -> dict:
    """Per schema size, constrained / free step over interleaved call pairs with a bootstrap CI, and
    the mask's own median cost. A constrained warm-up call precedes the first size (its first call
    paid one-time costs and made the smallest size look worst)."""
    from scgmem.core.schema import CognitiveSchema

    sizes = scale.pick([100, 1000, 5000, 20000], [100, 1000], [20, 100])
    n_pairs = scale.pick(12, 6, 2)
    pool = concept_pool(max(sizes))
    prompts = [llm.render(f"Extract the keywords of this message, separated by commas.\n\nMessage: {t}",
                          assistant_prefix="Keywords:") for t in PROMPTS]
    step_times(llm, prompts, None, scale.pick(5, 5, 1))  # warm-up, free
    free = step_times(llm, prompts, None, scale.pick(50, 20, 4))
    out = {"batch": len(prompts), "unconstrained_median_s": statistics.median(free), "sizes": {}}
    vocab = llm.model.get_output_embeddings().weight.shape[0]
    for n, size in enumerate(sizes):
        schema = CognitiveSchema(llm.encode, vocab, forbidden_ids=llm.eos_token_ids)
        t0 = time.perf_counter()
        for concept in pool[:size]:
            try:
                schema.add(concept)
            except ValueError:  # a string the schema refuses (e.g. one that tokenises to a forbidden id)
                pass
        build_s = time.perf_counter() - t0
        decoding = schema_constraint(llm, schema)
        mask_times: list[float] = []

        def timed(width, rows, decoding=decoding):
            return [TimedProcessor(p, mask_times) for p in decoding(width, rows)]
        if n == 0:
            call_median(llm, prompts, decoding)  # warm-up, constrained
        pairs = []
        for i in range(n_pairs):  # interleaved, alternating which side goes first
            if i % 2:
                f = call_median(llm, prompts, None)
                c = call_median(llm, prompts, timed)
            else:
                c = call_median(llm, prompts, timed)
                f = call_median(llm, prompts, None)
            pairs.append((c, f))
        paired = paired_ratio(pairs)
        base = statistics.median(f for _, f in pairs)
        out["sizes"][str(size)] = {
            "concepts": len(schema), "trie_nodes": schema.trie.num_nodes, "build_s": round(build_s, 3),
            "constrained_median_s": statistics.median(c for c, _ in pairs), "unconstrained_median_s": base,
            "constrained_step_ratio": paired["ratio"], "ratio_ci95": paired["ci95"], "pairs": paired["pairs"],
            # Less noisy on a shared machine: the mask's median cost added to a free step.
            "mask_median_s": statistics.median(mask_times),
            "mask_overhead_ratio": (base + statistics.median(mask_times)) / base,
        }
    worst = max(out["sizes"], key=lambda k: out["sizes"][k]["ratio_ci95"][1])  # the highest CI upper end
    out["worst_size"] = worst
    out["constrained_step_ratio"] = out["sizes"][worst]["constrained_step_ratio"]
    out["constrained_step_ratio_ci95"] = out["sizes"][worst]["ratio_ci95"]
    out["mask_overhead_ratio"] = max(v["mask_overhead_ratio"] for v in out["sizes"].values())
    return out


def previous_run(folder: Path, current: str) -> dict | None:
    """The newest earlier full-scale bench JSON in `folder` that measured this part: its file and ratios."""
    for path in sorted(folder.glob("2*.json"), reverse=True):
        if path.name == current or path.name.endswith("-tiny.json"):
            continue
        try:
            earlier = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # not a bench JSON of this shape
        step = earlier.get("constrained_step") if isinstance(earlier, dict) else None
        if step and not earlier.get("quick"):
            return {"file": path.name, "constrained_step_ratio": step["constrained_step_ratio"],
                    "mask_overhead_ratio": step.get("mask_overhead_ratio")}
    return None


def report_rows(step: dict) -> list[tuple]:
    """The lines `make bench` prints for this part."""
    before = step.get("previous")
    return [
        (f"constrained_step_ratio (worst CI: {step['worst_size']} concepts, 95% CI "
         f"{step['constrained_step_ratio_ci95'][0]:.3f}-{step['constrained_step_ratio_ci95'][1]:.3f})",
         step["constrained_step_ratio"], "<= 1.10, CI upper end included"),
        *([(f"  previous run ({before['file']})", before["constrained_step_ratio"], "")] if before else []),
        *[(f"  schema {k} concepts (95% CI {v['ratio_ci95'][0]:.3f}-{v['ratio_ci95'][1]:.3f})",
           v["constrained_step_ratio"], "") for k, v in step["sizes"].items()],
        ("mask_overhead_ratio (free step + mask) / free", step["mask_overhead_ratio"], "<= 1.10"),
        *[(f"  schema {k} concepts, mask ms", 1000 * v["mask_median_s"], "") for k, v in step["sizes"].items()],
    ]
