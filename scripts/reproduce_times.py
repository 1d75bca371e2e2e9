"""Expected hours of the reproduction sweeps on one H200 and on an 8-GPU node (docs/reproduce.md,
"How long"), from committed numbers only; nothing is run or timed here.

    .venv/bin/python -m scripts.reproduce_times            # the markdown tables of docs/reproduce.md

Inputs: the decode steps and prompt tokens of every method over all of LoCoMo, counted on the
scripted LLM (results/bench/20261203-batching.json), and per-model H200 rates, a decode step at 16
rows and a prefill rate, measured in bf16 on random weights for two shapes and scaled for the other
two (results/bench/20261204-h200-hours-from-device.json). Per job: steps x step + prompt tokens /
prefill rate (`bench_batching.h200_hours_measured`, the arithmetic of the committed Table 1 total).
Every number is an ESTIMATE and an upper bound on decoding (every batch runs to its token cap;
no prefix-cache savings); float32 (the paper's setting, the experiments' default) was not timed.
"""
from __future__ import annotations

import json
from pathlib import Path

from scripts.bench_batching import TABLE1_METHODS, h200_hours_measured

ROOT = Path(__file__).resolve().parents[1]

BATCHING = ROOT / "results" / "bench" / "20261203-batching.json"
RATES = ROOT / "results" / "bench" / "20261204-h200-hours-from-device.json"
# The Makefile's MODELS, in its order (Hydra's BasicSweeper: the first key is the outer loop, so
# job n of Table 1 is model n // 6, method n % 6; +launcher=gpu_shared puts it on GPU n mod GPUs).
MODELS = ("qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b")
FIGURE_MODEL = "qwen2.5-3b"  # table2, fig3, fig4 (configs/experiment/)
RUNS = {"table2": 4, "fig3": 10, "fig4": 3}  # SCG-Mem runs of each sweep
# (label, width key of the batching JSON, decode-step key): conversations one after another
# (run.parallel_conversations=1, the default) and ten in flight with 131,072-token batches.
WIDTHS = (("width 1", "parallel_1", "decode_steps_bound"),
          ("width 10", "parallel_10", "decode_steps_bound_max_batch_tokens_131072"))


def load() -> tuple[dict, dict]:
    methods = json.loads(BATCHING.read_text())["methods"]
    rates = {name: (r["decode_step_s_16_rows"], r["prefill_tokens_per_s"], r["source"])
             for name, r in json.loads(RATES.read_text())["table1_h200_hours_from_device"]["rates"].items()}
    return methods, rates


def job_hours(methods: dict, rates: dict, model: str, method: str, width: str, steps_key: str) -> float:
    """H200-hours of one run (one model, one method, all of LoCoMo), unrounded."""
    return h200_hours_measured({method: methods[method]}, width, {model: rates[model]}, steps_key=steps_key,
                               digits=None)


def table1_jobs(methods: dict, rates: dict, width: str, steps_key: str) -> list[tuple[str, str, float]]:
    """(model, method, hours) of Table 1's 24 jobs in sweep order."""
    return [(model, method, job_hours(methods, rates, model, method, width, steps_key))
            for model in MODELS for method in TABLE1_METHODS]


def node_hours(jobs: list[float], gpus: int = 8) -> tuple[float, float]:
    """(lower, upper) hours of the sweep on a node with `gpus` GPUs, all jobs started at once and job
    n on GPU n mod gpus: lower = the longest job, or the total spread evenly, whichever is larger;
    upper = the busiest GPU's jobs one after another (sharing a GPU gains nothing)."""
    per_gpu = [sum(jobs[g::gpus]) for g in range(gpus)]
    return max(max(jobs), sum(jobs) / gpus), max(per_gpu)


def _span(low: float, high: float) -> str:
    low_s, high_s = f"{low:.1f}", f"{high:.1f}"
    return low_s if low_s == high_s else f"{low_s}-{high_s}"


def report() -> str:
    methods, rates = load()
    lines = ["| sweep (jobs) | " + " | ".join(f"one H200, {w}" for w, _, _ in WIDTHS)
             + " | 8-GPU node, " + WIDTHS[0][0] + " | 8-GPU node, " + WIDTHS[1][0] + " |",
             "|---|---:|---:|---:|---:|"]
    cells, node = {}, {}
    for label, width, steps_key in WIDTHS:
        jobs = [h for _, _, h in table1_jobs(methods, rates, width, steps_key)]
        cells[("table1", label)], node[("table1", label)] = sum(jobs), node_hours(jobs)
        run = job_hours(methods, rates, FIGURE_MODEL, "scgmem", width, steps_key)
        for sweep, n in RUNS.items():
            cells[(sweep, label)], node[(sweep, label)] = n * run, node_hours([run] * n)
    for sweep, n in (("table1", 24), *RUNS.items()):
        lines.append(f"| {sweep} ({n}) | " + " | ".join(f"{cells[(sweep, w)]:.1f}" for w, _, _ in WIDTHS) + " | "
                     + " | ".join(_span(*node[(sweep, w)]) for w, _, _ in WIDTHS) + " |")
    lines += ["", "| Table 1 job, H200-hours (width 1 / width 10) | " + " | ".join(MODELS) + " |",
              "|---|" + "---:|" * len(MODELS)]
    per = {w: {(m, t): h for m, t, h in table1_jobs(methods, rates, k, s)} for w, k, s in WIDTHS}
    for method in TABLE1_METHODS:
        lines.append(f"| {method} | " + " | ".join(
            f"{per['width 1'][(m, method)]:.1f} / {per['width 10'][(m, method)]:.1f}" for m in MODELS) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
