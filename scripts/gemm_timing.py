"""Sustained throughput of the model's kernels on this CPU (used by bench_compute_bound.py).

Every measurement gives two rates:
  wall  FLOPs per wall second: what this process got, other jobs on the machine included;
  cpu   FLOPs per CPU second of this process: what a core does while it runs the kernel. On a shared
        machine this is the one that describes the hardware (a descheduled process burns no CPU
        time); neighbours still share caches and memory bandwidth, so it is not free of them.
Capacity (FLOPs per wall second the placement would reach on an otherwise idle machine):
  1 thread: cpu; 2 threads: 2 x cpu (assumes both threads hold a core; sleeping at a barrier is
  not CPU time, so this is an upper estimate); 2 processes: the sum of the two processes' cpu.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import time

import torch
import torch.nn.functional as F

from scgmem.report.flops import ModelShape

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def attention_function(implementation: str, groups: int):
    """The attention function a model with `model.attn_implementation=implementation` calls, as
    transformers dispatches it, and a stand-in for the attention module it reads settings from."""
    from types import SimpleNamespace

    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from scgmem.llm.local.gqa_attention import check_implementation

    check_implementation(implementation)  # registers gqa_sdpa
    if implementation == "eager":
        raise ValueError("attention timing covers the SDPA implementations (gqa_sdpa, sdpa), not eager")
    function = AttentionInterface().get(implementation, sdpa_attention_forward)
    return function, SimpleNamespace(num_key_value_groups=groups, is_causal=True, training=False)


def build_kernel(kind: str, shape: ModelShape, dtype: torch.dtype, **dims):
    """A callable doing one repetition of `kind`, and the FLOPs one repetition counts."""
    g = torch.Generator().manual_seed(0)

    def rand(*size):
        return torch.randn(*size, generator=g).to(dtype)

    if kind == "stack":
        m = dims["m"]
        layers = shape.layers if m <= 32 else min(2, shape.layers)
        weights = [[rand(n, k) for _, k, n in shape.layer_gemms()] for _ in range(layers)]
        inputs = {k: rand(m, k) for _, k, _ in shape.layer_gemms()}
        keys = [k for _, k, _ in shape.layer_gemms()]

        def run():
            for layer in weights:
                for k, w in zip(keys, layer):
                    F.linear(inputs[k], w)
        return run, 2 * m * layers * sum(k * n for _, k, n in shape.layer_gemms())
    if kind == "head":
        m = dims["m"]
        x, w = rand(m, shape.hidden), rand(shape.vocab, shape.hidden)
        return (lambda: F.linear(x, w)), 2 * m * shape.hidden * shape.vocab
    if kind in ("sdpa_prefill", "sdpa_decode"):
        rows, q_len, ctx = dims["rows"], dims["q_len"], dims["ctx"]
        q = rand(rows, shape.heads, q_len, shape.head_dim)
        k, v = (rand(rows, shape.kv_heads, ctx, shape.head_dim) for _ in range(2))
        causal = kind == "sdpa_prefill"
        attend, module = attention_function(dims.get("implementation", "gqa_sdpa"), shape.heads // shape.kv_heads)
        # what the run's forward passes: a batch-1 prefix prefill has no mask (causal); decode rows
        # of a left-padded batch carry a boolean padding mask over the keys
        mask = None if causal else torch.ones(rows, 1, 1, ctx, dtype=torch.bool)

        def run():
            attend(module, q, k, v, mask, scaling=shape.head_dim ** -0.5)
        pairs = rows * (q_len * ctx / 2 if causal else q_len * ctx)  # (query, key) pairs a layer computes
        return run, 4 * shape.attention_width * pairs
    raise ValueError(f"unknown kernel kind {kind!r}")


def windows_of(run, window_s: float, windows: int, barrier=None) -> list[tuple[int, float, float]]:
    """(repetitions, wall s, CPU s) of each window, after one warm-up repetition. A window ends after
    window_s of CPU time, or 4 x window_s of wall time on a crowded machine."""
    run()
    out = []
    for _ in range(windows):
        if barrier is not None:
            barrier.wait()
        reps, w0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            run()
            reps += 1
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if cpu >= window_s or wall >= 4 * window_s:
                break
        out.append((reps, wall, max(cpu, 1e-9)))
    return out


def best_rates(flops: float, windows: list[tuple[int, float, float]]) -> dict[str, float]:
    return {"wall": max(flops * r / w for r, w, _ in windows), "cpu": max(flops * r / c for r, _, c in windows)}


def measure(kind: str, shape: ModelShape, dtype: str = "fp32", threads: int = 1,
            window_s: float = 0.5, windows: int = 3, **dims) -> dict[str, float]:
    """Best wall and CPU rates (FLOP/s) of `kind` in this process at `threads` threads, plus capacity."""
    kept = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        run, flops = build_kernel(kind, shape, DTYPES[dtype], **dims)
        rates = best_rates(flops, windows_of(run, window_s, windows))
    finally:
        torch.set_num_threads(kept)
    return {**rates, "capacity": rates["cpu"] * threads}


def _worker(specs: list[dict], barrier, queue) -> None:
    torch.set_num_threads(1)
    for spec in specs:
        run, flops = build_kernel(spec["kind"], ModelShape(**spec["shape"]), DTYPES[spec["dtype"]], **spec["dims"])
        queue.put((flops, windows_of(run, spec["window_s"], spec["windows"], barrier)))


def measure_two_processes(specs: list[dict]) -> list[dict[str, float]]:
    """For each spec, two 1-thread processes running it at once (windows start together at a barrier):
    wall = summed FLOPs / the longer window; cpu = mean per-process CPU rate; capacity = their sum.
    One pair of processes serves every spec: spawning one costs seconds."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(specs, barrier, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    out = []
    for spec in specs:
        results = [queue.get() for _ in procs]
        walls, cpus = [], []
        for i in range(spec["windows"]):
            walls.append(sum(f * w[i][0] for f, w in results) / max(w[i][1] for _, w in results))
            cpus.append(sum(f * w[i][0] / w[i][2] for f, w in results))
        out.append({"wall": max(walls), "cpu": max(cpus) / 2, "capacity": max(cpus)})
    for p in procs:
        p.join()
    return out


def interpolate(grid: dict[int, float], m: float) -> float:
    """Rate at M from a grid measured at a few M, linear in log(M), clamped to the grid's ends."""
    ms = sorted(grid)
    if m <= ms[0]:
        return grid[ms[0]]
    if m >= ms[-1]:
        return grid[ms[-1]]
    for lo, hi in zip(ms, ms[1:]):
        if lo <= m <= hi:
            t = (math.log(m) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return grid[lo] + t * (grid[hi] - grid[lo])
    raise AssertionError("unreachable")
