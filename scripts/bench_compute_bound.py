"""Bench part `compute_bound`: this CPU's GEMM throughput at the embedded model's own shapes, and how
close a run's wall time came to the time its LLM arithmetic needs (scgmem/report/flops.py counts it).

    .venv/bin/python scripts/bench_compute_bound.py --run results/runs/cb_small   # or COMPUTE_BOUND_RUN=DIR
    BENCH_PARTS=compute_bound make bench                                          # same, as a bench part
    .venv/bin/python scripts/bench_compute_bound.py --quick                       # tiny shapes (smoke test)

Throughput is measured as sustained rate over short windows (best of a few: the machine is shared):
  stack    the decoder layers' 7 weight products at M rows (M = prompt tokens of a batch in prefill,
           batch rows in decode); the distinct weights of every layer at M <= 32 (decode streams them
           from memory as the model does), 2 layers above (weights reused M times: compute-bound)
  head     lm_head (d x vocab) at M rows
  sdpa     causal attention (torch's scaled_dot_product_attention, KV heads repeated as HF does)
fp32 always; bf16 only where the CPU has native bf16 instructions (avx512_bf16 or amx_bf16).
Thread placement: 1 thread, 2 threads in one process, 2 processes of 1 thread running at once.

compute_bound_s (per phase): each FLOP kind divided by the rate measured at the phase's own shapes,
  with the machine's best 2-core placement; compute_bound_1thread_s: the same at 1 thread.
efficiency = compute_bound_s / wall_s, wall_s = the phase's time in the summary (ingest_s; recall and
  answer share answer_s); the run total also uses the model load time only when --wall is given.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scgmem.report.flops import ModelShape, parse_cpuinfo, run_flops  # noqa: E402

# The summary's timing field each phase's LLM work runs inside.
PHASE_CLOCK = {"ingest": "ingest_s", "recall": "answer_s", "answer": "answer_s"}
TINY = ModelShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=512)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def embedded_model_dir() -> Path:
    from scgmem.llm.loading import default_cache_dir

    return default_cache_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1"


def read_cpu() -> dict:
    info = parse_cpuinfo(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").is_file() else {
        "model_name": None, "logical_cpus": os.cpu_count(), "vector_flags": [], "native_bf16": False}
    info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return info


# ---------------------------------------------------------------------------------------------- kernels
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
        groups = shape.heads // shape.kv_heads
        causal = kind == "sdpa_prefill"

        def run():
            kk, vv = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)
        pairs = rows * (q_len * ctx / 2 if causal else q_len * ctx)  # (query, key) pairs a layer computes
        return run, 4 * shape.attention_width * pairs
    raise ValueError(f"unknown kernel kind {kind!r}")


def sustained_rate(run, flops: float, window_s: float, windows: int, barrier=None) -> list[tuple[int, float]]:
    """(repetitions, seconds) of each window; one warm-up repetition first."""
    run()
    out = []
    for _ in range(windows):
        if barrier is not None:
            barrier.wait()
        reps, t0 = 0, time.perf_counter()
        while True:
            run()
            reps += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= window_s:
                break
        out.append((reps, elapsed))
    return out


def _worker(specs: list[dict], barrier, queue) -> None:
    torch.set_num_threads(1)
    for spec in specs:
        run, flops = build_kernel(spec["kind"], ModelShape(**spec["shape"]), DTYPES[spec["dtype"]], **spec["dims"])
        queue.put((flops, sustained_rate(run, flops, spec["window_s"], spec["windows"], barrier)))


def measure_two_processes(specs: list[dict]) -> list[float]:
    """For each spec, the best summed FLOP/s of two 1-thread processes running it at once (windows
    start together at a barrier). One pair of processes serves every spec: spawning costs seconds."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(specs, barrier, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    rates = []
    for spec in specs:
        results = [queue.get() for _ in procs]
        rates.append(max(sum(f * w[i][0] for f, w in results) / max(w[i][1] for _, w in results)
                         for i in range(spec["windows"])))
    for p in procs:
        p.join()
    return rates


def measure(kind: str, shape: ModelShape, dtype: str = "fp32", threads: int = 1,
            window_s: float = 0.5, windows: int = 3, **dims) -> float:
    """Best sustained FLOP/s of `kind` in this process at `threads` threads, over `windows` windows."""
    kept = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        run, flops = build_kernel(kind, shape, DTYPES[dtype], **dims)
        return max(flops * reps / secs for reps, secs in sustained_rate(run, flops, window_s, windows))
    finally:
        torch.set_num_threads(kept)


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


# ----------------------------------------------------------------------------------------------- the run
def load_run(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no run summary (is --run a finished run directory?)")
    return json.loads(path.read_text())


def phase_shapes(flops: dict, batch_size: int, max_batch_tokens: int, quick: bool = False) -> dict:
    """The M (rows of a weight product) and attention shapes a phase's work runs at (quick: capped)."""
    rows = max(1, min(batch_size, int(flops["calls"])))
    suffix = max(1.0, flops["mean_prompt"] - flops["mean_cached"])
    cap = 32 if quick else max_batch_tokens
    return {"rows": rows, "m_prefill": min(rows * suffix, max_batch_tokens, 2 * cap), "m_decode": rows,
            "prefill_len": min(cap, max(1, round(suffix))), "prefill_ctx": min(cap, max(1, round(flops["mean_prompt"]))),
            "decode_ctx": min(cap, max(1, round(flops["mean_prompt"] + flops["mean_generated"] / 2)))}


def run_settings(summary: dict) -> tuple[int, int]:
    """The run's batch size and padded-token cap per batch (the backend's defaults when absent)."""
    model = (summary.get("config") or {}).get("model") or {}
    return int(model.get("batch_size", 8)), int(model.get("max_batch_tokens", 16384))


def bound_seconds(flops: dict, shapes: dict, rates: dict, scale_prefill: float, scale_decode: float) -> dict:
    """Seconds each FLOP kind needs at the measured rates; scale_*: placement gain over 1 thread."""
    stack, head = rates["stack"], rates["head"]
    parts = {
        "body_prefill": flops["body_prefill"] / (interpolate(stack, shapes["m_prefill"]) * scale_prefill),
        "body_decode": flops["body_decode"] / (interpolate(stack, shapes["m_decode"]) * scale_decode),
        "head": flops["head"] / (interpolate(head, shapes["m_decode"]) * scale_decode),
        "attention_prefill": flops["attention_prefill"] / (rates["sdpa_prefill"] * scale_prefill),
        "attention_decode": flops["attention_decode"] / (rates["sdpa_decode"] * scale_decode),
    }
    parts["total"] = sum(parts.values())
    return parts


def measure_rates(shape: ModelShape, quick: bool, attention_shapes: list[dict]) -> dict:
    """1-thread fp32 rates: stack and head over a grid of M, attention at each phase's shapes."""
    window, windows = (0.05, 1) if quick else (0.5, 3)
    ms = [1, 8, 64] if quick else [1, 8, 32, 128, 512, 2048]
    head_ms = [1, 8, 64] if quick else [1, 8, 64, 512, 2048]
    rates = {"stack": {m: measure("stack", shape, m=m, window_s=window, windows=windows) for m in ms},
             "head": {m: measure("head", shape, m=m, window_s=window, windows=windows) for m in head_ms}}
    for dims in attention_shapes:
        key = f"{dims['kind']}:{dims['rows']}x{dims['q_len']}x{dims['ctx']}"
        if key not in rates:
            rates[key] = measure(dims["kind"], shape, window_s=window, windows=windows,
                                 **{k: v for k, v in dims.items() if k != "kind"})
    return rates


def measure_placement(shape: ModelShape, quick: bool, m_decode: int, m_prefill: int) -> dict:
    """Stack throughput at a decode-like and a prefill-like M: 1 thread, 2 threads, 2 processes of 1."""
    window, windows = (0.05, 1) if quick else (0.5, 3)
    points = (("decode", m_decode), ("prefill", m_prefill))
    pairs = measure_two_processes([{"kind": "stack", "shape": shape.__dict__, "dtype": "fp32", "dims": {"m": m},
                                    "window_s": window, "windows": windows} for _, m in points])
    out = {}
    for (label, m), two_procs in zip(points, pairs):
        row = {"1thread": measure("stack", shape, threads=1, m=m, window_s=window, windows=windows),
               "2threads": measure("stack", shape, threads=2, m=m, window_s=window, windows=windows),
               "2procs": two_procs}
        row.update({"m": m, "2threads_over_1": row["2threads"] / row["1thread"],
                    "2procs_over_1": row["2procs"] / row["1thread"],
                    "2procs_over_2threads": row["2procs"] / row["2threads"]})
        row["best_2core_gain"] = max(row["2threads_over_1"], row["2procs_over_1"])
        out[label] = row
    return out


def measure_bf16(shape: ModelShape, cpu: dict, quick: bool, ms: tuple[int, int]) -> dict:
    if not cpu["native_bf16"]:
        return {"measured": False, "reason": "no native bf16 instructions (neither avx512_bf16 nor amx_bf16 "
                                              f"in flags: {' '.join(cpu['vector_flags'])})"}
    window, windows = (0.05, 1) if quick else (0.5, 3)
    out = {"measured": True}
    for m in ms:
        fp32 = measure("stack", shape, "fp32", m=m, window_s=window, windows=windows)
        bf16 = measure("stack", shape, "bf16", m=m, window_s=window, windows=windows)
        out[f"m{m}"] = {"fp32": fp32, "bf16": bf16, "bf16_over_fp32": bf16 / fp32}
    return out


def logits_cost(shape: ModelShape, rates: dict, rows: int, prompt_len: int) -> dict:
    """Prefill with lm_head over every prompt position vs over the last one per row (measured rates)."""
    m = rows * prompt_len
    body_s = 2 * m * shape.body_params / interpolate(rates["stack"], m)
    head_all_s = 2 * m * shape.head_params / interpolate(rates["head"], m)
    head_last_s = 2 * rows * shape.head_params / interpolate(rates["head"], rows)
    return {"rows": rows, "prompt_len": prompt_len, "head_all_over_last": head_all_s / head_last_s,
            "prefill_with_all_logits_over_last_only": (body_s + head_all_s) / (body_s + head_last_s)}


def run_efficiency(shape: ModelShape, summary: dict, rates: dict, placement: dict, source: str,
                   quick: bool = False) -> dict:
    batch_size, max_tokens = run_settings(summary)
    timing = summary.get("timing") or {}
    phases, clocks = {}, {}
    for phase, flops in run_flops(shape, summary, source).items():
        if not flops["calls"]:
            continue
        shapes = phase_shapes(flops, batch_size, max_tokens, quick)
        phase_rates = {"stack": rates["stack"], "head": rates["head"],
                       "sdpa_prefill": rates[f"sdpa_prefill:1x{shapes['prefill_ctx']}x{shapes['prefill_ctx']}"],
                       "sdpa_decode": rates[f"sdpa_decode:{shapes['rows']}x1x{shapes['decode_ctx']}"]}
        one = bound_seconds(flops, shapes, phase_rates, 1.0, 1.0)
        best = bound_seconds(flops, shapes, phase_rates, placement["prefill"]["best_2core_gain"],
                             placement["decode"]["best_2core_gain"])
        phases[phase] = {"flops": flops, "shapes": shapes, "bound_s": best, "bound_1thread_s": one}
        clock = PHASE_CLOCK.get(phase)
        if clock in timing:
            c = clocks.setdefault(clock, {"wall_s": float(timing[clock]), "compute_bound_s": 0.0,
                                          "compute_bound_1thread_s": 0.0})
            c["compute_bound_s"] += best["total"]
            c["compute_bound_1thread_s"] += one["total"]
    for c in clocks.values():
        c["efficiency"] = c["compute_bound_s"] / c["wall_s"] if c["wall_s"] else None
        c["efficiency_1thread"] = c["compute_bound_1thread_s"] / c["wall_s"] if c["wall_s"] else None
    wall = sum(c["wall_s"] for c in clocks.values())
    bound = sum(p["bound_s"]["total"] for p in phases.values())
    bound_one = sum(p["bound_1thread_s"]["total"] for p in phases.values())
    return {"phases": phases, "clocks": clocks, "flops_total": sum(p["flops"]["total"] for p in phases.values()),
            "compute_bound_s": bound, "compute_bound_1thread_s": bound_one, "wall_s": wall,
            "wall_s_is": "sum of the summary's ingest_s and answer_s (model load and data loading excluded)",
            "efficiency": bound / wall if wall else None, "efficiency_1thread": bound_one / wall if wall else None}


def bench_compute_bound(run_dir: Path | None = None, quick: bool = False, wall_s: float | None = None) -> dict:
    cpu = read_cpu()
    shape = TINY if quick else ModelShape.from_dir(embedded_model_dir())
    summary = load_run(run_dir) if run_dir else None
    if summary is not None:
        batch, max_tokens = run_settings(summary)
        shapes = [phase_shapes(f, batch, max_tokens, quick)
                  for f in run_flops(shape, summary, str(run_dir)).values() if f["calls"]]
    else:  # no run: a typical answer batch (8 rows of 256 tokens, 16 generated)
        typical = {"calls": 8, "mean_prompt": 256.0, "mean_cached": 0.0, "mean_generated": 16.0}
        shapes = [phase_shapes(typical, 8, 16384, quick)]
    attention = [d for s in shapes for d in (
        {"kind": "sdpa_prefill", "rows": 1, "q_len": s["prefill_ctx"], "ctx": s["prefill_ctx"]},
        {"kind": "sdpa_decode", "rows": s["rows"], "q_len": 1, "ctx": s["decode_ctx"]})]
    load_before = os.getloadavg()
    rates = measure_rates(shape, quick, attention)
    heaviest = max(shapes, key=lambda s: s["m_prefill"])
    m_prefill = int(min(max(heaviest["m_prefill"], 8), max(rates["stack"])))
    placement = measure_placement(shape, quick, m_decode=heaviest["m_decode"], m_prefill=m_prefill)
    out = {"quick": quick, "cpu": cpu, "model_shape": shape.__dict__,
           "body_params": shape.body_params, "head_params": shape.head_params,
           "loadavg_before_after": [load_before, os.getloadavg()],
           "rates_gflops_1thread_fp32": {k: ({str(m): r / 1e9 for m, r in v.items()} if isinstance(v, dict)
                                             else v / 1e9) for k, v in rates.items()},
           "placement_gflops": {k: {p: (v / 1e9 if p in ("1thread", "2threads", "2procs") else v)
                                    for p, v in row.items()} for k, row in placement.items()},
           "bf16": measure_bf16(shape, cpu, quick, (heaviest["m_decode"], m_prefill)),
           "logits_over_prompt": logits_cost(shape, rates, heaviest["rows"], heaviest["prefill_len"])}
    if summary is not None:
        eff = run_efficiency(shape, summary, rates, placement, str(run_dir / "summary.json"), quick)
        if wall_s is not None:  # the process's own wall time (model load, data, embedder included)
            eff.update(wall_s=wall_s, wall_s_is="measured around the whole command",
                       efficiency=eff["compute_bound_s"] / wall_s,
                       efficiency_1thread=eff["compute_bound_1thread_s"] / wall_s)
        out["run"] = {"dir": str(run_dir), "method": summary.get("method"), "model": summary.get("model"),
                      "n_questions": summary.get("n_questions"), **eff}
        out.update(compute_bound_s=eff["compute_bound_s"], wall_s=eff["wall_s"], efficiency=eff["efficiency"])
    return out


def report_rows(result: dict) -> list[tuple[str, float | None, str]]:
    place = result["placement_gflops"]
    rows = [(f"GEMM GFLOP/s 1 thread, stack M={m}", v, "") for m, v in result["rates_gflops_1thread_fp32"]
            ["stack"].items()]
    for label, row in place.items():
        rows += [(f"{label} M={row['m']}: 2 threads / 1 thread", row["2threads_over_1"], ""),
                 (f"{label} M={row['m']}: 2 procs of 1 / 1 thread", row["2procs_over_1"], ""),
                 (f"{label} M={row['m']}: 2 procs / 2 threads", row["2procs_over_2threads"], "")]
    logits = result["logits_over_prompt"]
    rows += [("lm_head over all prompt positions / last only", logits["head_all_over_last"], ""),
             ("prefill with all logits / last only", logits["prefill_with_all_logits_over_last_only"], "")]
    if result["bf16"]["measured"]:
        rows += [(f"bf16 / fp32 stack {k}", v["bf16_over_fp32"], "") for k, v in result["bf16"].items()
                 if isinstance(v, dict)]
    if "run" in result:
        run = result["run"]
        for clock, c in run["clocks"].items():
            rows += [(f"{clock}: compute bound s (2 cores)", c["compute_bound_s"], ""),
                     (f"{clock}: wall s", c["wall_s"], ""), (f"{clock}: efficiency", c["efficiency"], ">= 0.67")]
        rows += [("run compute_bound_s (2 cores)", run["compute_bound_s"], ""),
                 ("run compute_bound_1thread_s", run["compute_bound_1thread_s"], ""),
                 ("run wall_s", run["wall_s"], ""), ("run efficiency", run["efficiency"], ">= 0.67"),
                 ("run efficiency vs 1-thread bound", run["efficiency_1thread"], "")]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=os.environ.get("COMPUTE_BOUND_RUN"),
                        help="a finished run directory (summary.json); env COMPUTE_BOUND_RUN")
    parser.add_argument("--wall", type=float, help="the command's own wall seconds, if measured around it")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and windows (a smoke run)")
    parser.add_argument("--out", type=Path, help="JSON path (default results/bench/compute_bound-<stamp>.json)")
    args = parser.parse_args()
    result = bench_compute_bound(args.run, quick=args.quick, wall_s=args.wall)
    out = args.out or ROOT / "results" / "bench" / f"compute_bound-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"cpu: {result['cpu']['model_name']}; flags: {' '.join(result['cpu']['vector_flags'])}")
    for name, value, goal in report_rows(result):
        print(f"{name:50s} {'-' if value is None else f'{value:10.3f}':>10}  {goal}")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
