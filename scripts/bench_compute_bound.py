"""Bench part `compute_bound`: this CPU's GEMM throughput at the embedded model's own shapes, and how
close a run's wall time came to the time its LLM arithmetic needs (scgmem/report/flops.py counts it).

    .venv/bin/python -m scripts.bench_compute_bound --run results/runs/cb_small   # or COMPUTE_BOUND_RUN=DIR
    BENCH_PARTS=compute_bound make bench                                          # same, as a bench part
    .venv/bin/python -m scripts.bench_compute_bound --quick                       # tiny shapes (smoke test)
    .venv/bin/python -m scripts.bench_compute_bound --shards A B --wall W         # shards run side by side

Kernels (scripts/gemm_timing.py), each timed as a sustained rate over short windows, best of three:
  stack    the decoder layers' 7 weight products at M rows (M = prompt tokens of a batch in prefill,
           batch rows in decode); the distinct weights of every layer at M <= 32 (decode streams them
           from memory as the model does), 2 layers above (weights reused M times: compute-bound)
  head     lm_head (d x vocab) at M rows
  sdpa     attention at each phase's mean lengths, through the attention function the run's model
           called (its model.attn_implementation, as transformers dispatches it: gqa_sdpa packs a
           decode step's query heads against unrepeated K/V; runs before that key ran `sdpa`):
           causal prefill, and one query row per sequence in decode under a padding mask
fp32 always; bf16 only where the CPU has native bf16 instructions (avx512_bf16 or amx_bf16).
Thread placement: 1 thread, 2 threads in one process, 2 processes of 1 thread running at once.

compute_bound_1core_s: each FLOP kind of each phase / the 1-thread rate per CPU second at the phase's
  own shapes (what one core does; CPU time, because this machine is shared: see gemm_timing.py).
compute_bound_s: the same with the machine's best 2-core placement (its measured capacity gain
  over 1 thread, at a decode-like and a prefill-like M).
efficiency = compute_bound_s / wall_s; wall_s = the summary's ingest_s + answer_s, or --wall (the
  whole command). With --cpu-s (the run's CPU seconds): efficiency_cpu = compute_bound_1core_s / cpu_s,
  how much of the core time the run got went into needed arithmetic at the measured rates.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from scgmem.report.flops import ModelShape, parse_cpuinfo, run_flops
from scripts.compute_bound_runs import (  # noqa: F401 (the run's own work: re-exported for callers and tests)
    LOADED_FROM_CACHE, RESUMED, cached_ingest, earlier_answer_s, load_run, read_log, work_done_here)
from scripts.gemm_timing import interpolate, measure, measure_two_processes

ROOT = Path(__file__).resolve().parents[1]

# The summary's timing field each phase's LLM work runs inside.
PHASE_CLOCK = {"ingest": "ingest_s", "recall": "answer_s", "answer": "answer_s"}
TINY = ModelShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=512)


def embedded_model_dir() -> Path:
    from scgmem.llm.loading import default_cache_dir

    return default_cache_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1"


def read_cpu() -> dict:
    info = parse_cpuinfo(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").is_file() else {
        "model_name": None, "logical_cpus": os.cpu_count(), "vector_flags": [], "native_bf16": False}
    info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return info


def phase_shapes(flops: dict, batch_size: int, max_batch_tokens: int, quick: bool = False) -> dict:
    """The M (rows of a weight product) and attention lengths a phase's work runs at: a batch of
    `rows` prompts prefills rows x (prompt - cached) tokens at once and then decodes `rows` at a time.
    quick: lengths capped at 32 (tiny kernels for the smoke test)."""
    rows = max(1, min(batch_size, int(flops["calls"])))
    suffix = max(1.0, flops["mean_prompt"] - flops["mean_cached"])
    cap = 32 if quick else max_batch_tokens

    def length(x: float) -> int:
        return min(cap, max(1, round(x)))
    return {"rows": rows, "m_prefill": min(rows * suffix, max_batch_tokens, 2 * cap), "m_decode": rows,
            "prefill_len": length(suffix), "prefill_ctx": length(flops["mean_prompt"]),
            "decode_ctx": length(flops["mean_prompt"] + flops["mean_generated"] / 2)}


def run_settings(summary: dict) -> tuple[int, int]:
    """The run's batch size and padded-token cap per batch (the backend's defaults when absent)."""
    model = (summary.get("config") or {}).get("model") or {}
    return int(model.get("batch_size", 8)), int(model.get("max_batch_tokens", 16384))


def bound_seconds(flops: dict, shapes: dict, rates: dict, gain_prefill: float, gain_decode: float) -> dict:
    """Seconds each FLOP kind needs at the 1-thread CPU rates, times a placement's gain over 1 thread."""
    def rate(kind, m=None):
        grid = rates[kind]
        return interpolate({k: v["cpu"] for k, v in grid.items()}, m) if m is not None else grid["cpu"]
    parts = {
        "body_prefill": flops["body_prefill"] / (rate("stack", shapes["m_prefill"]) * gain_prefill),
        "body_decode": flops["body_decode"] / (rate("stack", shapes["m_decode"]) * gain_decode),
        "head": flops["head"] / (rate("head", shapes["m_decode"]) * gain_decode),
        "attention_prefill": flops["attention_prefill"] / (rate("sdpa_prefill") * gain_prefill),
        "attention_decode": flops["attention_decode"] / (rate("sdpa_decode") * gain_decode),
    }
    parts["total"] = sum(parts.values())
    return parts


def attention_key(kind: str, rows: int, q_len: int, ctx: int, implementation: str = "gqa_sdpa") -> str:
    return f"{kind}:{rows}x{q_len}x{ctx}:{implementation}"


def run_attention(summary: dict | None) -> str:
    """The attention implementation the run's model used: recorded in its generation report (or its
    config); a run from before `model.attn_implementation` existed ran transformers' `sdpa`."""
    if summary is None:
        return "gqa_sdpa"  # the backend's default
    recorded = (summary.get("generation") or {}).get("attn_implementation")
    model = (summary.get("config") or {}).get("model") or {}
    return recorded or model.get("attn_implementation") or "sdpa"


def attention_dims(shapes: dict, implementation: str = "gqa_sdpa") -> list[dict]:
    return [{"kind": "sdpa_prefill", "rows": 1, "q_len": shapes["prefill_ctx"], "ctx": shapes["prefill_ctx"],
             "implementation": implementation},
            {"kind": "sdpa_decode", "rows": shapes["rows"], "q_len": 1, "ctx": shapes["decode_ctx"],
             "implementation": implementation}]


def measure_rates(shape: ModelShape, quick: bool, attention: list[dict]) -> dict:
    """1-thread fp32 rates: stack and head over a grid of M, attention at each phase's shapes."""
    window, windows = (0.05, 1) if quick else (0.5, 3)
    ms = [1, 8, 64] if quick else [1, 8, 32, 128, 512, 2048]
    head_ms = [1, 8, 64] if quick else [1, 8, 64, 512, 2048]
    rates = {"stack": {m: measure("stack", shape, m=m, window_s=window, windows=windows) for m in ms},
             "head": {m: measure("head", shape, m=m, window_s=window, windows=windows) for m in head_ms}}
    for dims in attention:
        key = attention_key(**dims)
        if key not in rates:
            rates[key] = measure(dims["kind"], shape, window_s=window, windows=windows,
                                 **{k: v for k, v in dims.items() if k != "kind"})
    return rates


def measure_placement(shape: ModelShape, quick: bool, m_decode: int, m_prefill: int, cores: int) -> dict:
    """Stack throughput at a decode-like and a prefill-like M: 1 thread, 2 threads, 2 processes of 1.
    best_2core_gain is kept within [1, cores]: a noisy 1-thread window can make a ratio exceed what
    the cores can give."""
    window, windows = (0.05, 1) if quick else (0.5, 3)
    points = (("decode", m_decode), ("prefill", m_prefill))
    pairs = measure_two_processes([{"kind": "stack", "shape": shape.__dict__, "dtype": "fp32", "dims": {"m": m},
                                    "window_s": window, "windows": windows} for _, m in points])
    out = {}
    for (label, m), two_procs in zip(points, pairs):
        row = {"m": m, "1thread": measure("stack", shape, threads=1, m=m, window_s=window, windows=windows),
               "2threads": measure("stack", shape, threads=2, m=m, window_s=window, windows=windows),
               "2procs": two_procs}
        for kind in ("wall", "capacity"):  # wall: under the load of the moment; capacity: see gemm_timing
            one = row["1thread"][kind]
            row[f"{kind}_2threads_over_1"] = row["2threads"][kind] / one
            row[f"{kind}_2procs_over_1"] = row["2procs"][kind] / one
            row[f"{kind}_2procs_over_2threads"] = row["2procs"][kind] / row["2threads"][kind]
        row["best_2core_gain"] = min(float(max(cores, 1)), max(1.0, row["capacity_2threads_over_1"],
                                                               row["capacity_2procs_over_1"]))
        out[label] = row
    return out


def measure_bf16(shape: ModelShape, cpu: dict, quick: bool, ms: tuple[int, int]) -> dict:
    if not cpu["native_bf16"]:
        return {"measured": False, "reason": "no native bf16 instructions (neither avx512_bf16 nor amx_bf16 "
                                              f"in flags: {' '.join(cpu['vector_flags'])})"}
    window, windows = (0.05, 1) if quick else (0.5, 3)
    out = {"measured": True}
    for m in ms:
        fp32 = measure("stack", shape, "fp32", m=m, window_s=window, windows=windows)["cpu"]
        bf16 = measure("stack", shape, "bf16", m=m, window_s=window, windows=windows)["cpu"]
        out[f"m{m}"] = {"fp32_gflops": fp32 / 1e9, "bf16_gflops": bf16 / 1e9, "bf16_over_fp32": bf16 / fp32}
    return out


def logits_cost(shape: ModelShape, rates: dict, rows: int, prompt_len: int) -> dict:
    """Prefill with lm_head over every prompt position vs over the last one per row (measured rates)."""
    stack = {m: r["cpu"] for m, r in rates["stack"].items()}
    head = {m: r["cpu"] for m, r in rates["head"].items()}
    m = rows * prompt_len
    body_s = 2 * m * shape.body_params / interpolate(stack, m)
    head_all_s = 2 * m * shape.head_params / interpolate(head, m)
    head_last_s = 2 * rows * shape.head_params / interpolate(head, rows)
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
        prefill_dims, decode_dims = attention_dims(shapes, run_attention(summary))
        phase_rates = {"stack": rates["stack"], "head": rates["head"],
                       "sdpa_prefill": rates[attention_key(**prefill_dims)],
                       "sdpa_decode": rates[attention_key(**decode_dims)]}
        one = bound_seconds(flops, shapes, phase_rates, 1.0, 1.0)
        best = bound_seconds(flops, shapes, phase_rates, placement["prefill"]["best_2core_gain"],
                             placement["decode"]["best_2core_gain"])
        phases[phase] = {"flops": flops, "shapes": shapes, "bound_s": best, "bound_1core_s": one}
        clock = PHASE_CLOCK.get(phase)
        if clock in timing:
            c = clocks.setdefault(clock, {"wall_s": float(timing[clock]), "compute_bound_s": 0.0,
                                          "compute_bound_1core_s": 0.0})
            c["compute_bound_s"] += best["total"]
            c["compute_bound_1core_s"] += one["total"]
    for c in clocks.values():
        c["efficiency"] = c["compute_bound_s"] / c["wall_s"] if c["wall_s"] else None
    # Phases outside the three above (e.g. calls made under the meter's default phase "other") are
    # counted in the run's total, which is set against the run's whole LLM time.
    wall = float(timing.get("ingest_s", 0.0)) + float(timing.get("answer_s", 0.0))
    bound = sum(p["bound_s"]["total"] for p in phases.values())
    bound_one = sum(p["bound_1core_s"]["total"] for p in phases.values())
    total = sum(p["flops"]["total"] for p in phases.values())
    # Every FLOP at the best rate measured (large-M GEMM, best 2-core placement): what bigger batches
    # and faster attention kernels could reach at most.
    peak = max(r["cpu"] for r in rates["stack"].values()) * placement["prefill"]["best_2core_gain"]
    return {"phases": phases, "clocks": clocks, "unattributed_phases": sorted(set(phases) - set(PHASE_CLOCK)),
            "flops_total": total, "compute_bound_peak_s": total / peak,
            "compute_bound_s": bound, "compute_bound_1core_s": bound_one, "wall_s": wall,
            "wall_s_is": "sum of the summary's ingest_s and answer_s (model load and data loading excluded)",
            "efficiency": bound / wall if wall else None, "efficiency_1core": bound_one / wall if wall else None}


def gflops(rate: dict) -> dict:
    return {k: v / 1e9 for k, v in rate.items()}


def bench_compute_bound(run_dir: Path | None = None, quick: bool = False, wall_s: float | None = None,
                        cpu_s: float | None = None, shards: list[Path] | None = None) -> dict:
    """shards: run directories that ran at the same time, one process each (in place of run_dir):
    their work is counted by `work_done_here`, and wall_s should be the span of all of them."""
    cpu = read_cpu()
    shape = TINY if quick else ModelShape.from_dir(embedded_model_dir())
    if shards:
        summary, run_dir = work_done_here(shards), Path(shards[0]).parent
    else:
        summary = load_run(run_dir) if run_dir else None
    if summary is not None:
        batch, max_tokens = run_settings(summary)
        shapes = [phase_shapes(f, batch, max_tokens, quick)
                  for f in run_flops(shape, summary, str(run_dir)).values() if f["calls"]]
    else:  # no run: a typical answer batch (8 rows of 256 tokens, 16 generated)
        typical = {"calls": 8, "mean_prompt": 256.0, "mean_cached": 0.0, "mean_generated": 16.0}
        shapes = [phase_shapes(typical, 8, 16384, quick)]
    load_before = os.getloadavg()
    rates = measure_rates(shape, quick, [d for s in shapes for d in attention_dims(s, run_attention(summary))])
    heaviest = max(shapes, key=lambda s: s["m_prefill"])
    m_prefill = int(min(max(heaviest["m_prefill"], 8), max(rates["stack"])))
    placement = measure_placement(shape, quick, m_decode=heaviest["m_decode"], m_prefill=m_prefill,
                                  cores=min(2, cpu["logical_cpus"] or 1))
    out = {"quick": quick, "cpu": cpu, "attn_implementation": run_attention(summary), "model_shape": shape.__dict__,
           "body_params": shape.body_params, "head_params": shape.head_params,
           "loadavg_before_after": [load_before, os.getloadavg()],
           "rates_gflops_1thread_fp32": {k: ({str(m): gflops(r) for m, r in v.items()} if "cpu" not in v
                                             else gflops(v)) for k, v in rates.items()},
           "placement_gflops": {k: {p: (gflops(v) if isinstance(v, dict) else v) for p, v in row.items()}
                                for k, row in placement.items()},
           "bf16": measure_bf16(shape, cpu, quick, (heaviest["m_decode"], m_prefill)),
           "logits_over_prompt": logits_cost(shape, rates, heaviest["rows"], heaviest["prefill_len"])}
    if summary is not None:
        eff = run_efficiency(shape, summary, rates, placement, str(run_dir / "summary.json"), quick)
        if wall_s is not None:  # the process's own wall time (model load, data, embedder included)
            eff.update(wall_s=wall_s, wall_s_is="measured around the whole command",
                       efficiency=eff["compute_bound_s"] / wall_s,
                       efficiency_1core=eff["compute_bound_1core_s"] / wall_s)
        if cpu_s is not None:  # CPU seconds the run's process used: robust to other jobs on the machine
            eff.update(cpu_s=cpu_s, efficiency_cpu=eff["compute_bound_1core_s"] / cpu_s)
        out["run"] = {"dir": str(run_dir), "method": summary.get("method"), "model": summary.get("model"),
                      "n_questions": summary.get("n_questions"), **eff}
        if shards:
            out["run"].update(shards=summary["shards"], cached_ingest_subtracted=summary["cached_ingest_subtracted"],
                              wall_s_is=f"{out['run']['wall_s_is']} (shards side by side: their span)")
        out.update(compute_bound_s=eff["compute_bound_s"], wall_s=eff["wall_s"], efficiency=eff["efficiency"])
    return out


def report_rows(result: dict) -> list[tuple[str, float | None, str]]:
    rows = [(f"stack GFLOP/s per CPU s, 1 thread, M={m}", v["cpu"], "")
            for m, v in result["rates_gflops_1thread_fp32"]["stack"].items()]
    for label, row in result["placement_gflops"].items():
        rows += [(f"{label} M={row['m']}: capacity 2 threads / 1", row["capacity_2threads_over_1"], ""),
                 (f"{label} M={row['m']}: capacity 2 procs / 1", row["capacity_2procs_over_1"], ""),
                 (f"{label} M={row['m']}: capacity 2 procs / 2 threads", row["capacity_2procs_over_2threads"], ""),
                 (f"{label} M={row['m']}: wall now 2 procs / 2 threads", row["wall_2procs_over_2threads"], "")]
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
        rows += [("run compute_bound_peak_s (best rate, 2 cores)", run["compute_bound_peak_s"], ""),
                 ("run compute_bound_s (2 cores)", run["compute_bound_s"], ""),
                 ("run compute_bound_1core_s", run["compute_bound_1core_s"], ""),
                 ("run wall_s", run["wall_s"], ""), ("run efficiency", run["efficiency"], ">= 0.67"),
                 ("run efficiency vs 1-core bound", run["efficiency_1core"], "")]
        if "cpu_s" in run:
            rows += [("run CPU s (user + sys)", run["cpu_s"], ""),
                     ("efficiency_cpu: 1-core bound / CPU s", run["efficiency_cpu"], "")]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=os.environ.get("COMPUTE_BOUND_RUN"),
                        help="a finished run directory (summary.json); env COMPUTE_BOUND_RUN")
    parser.add_argument("--shards", type=Path, nargs="+",
                        help="run directories that ran side by side, one process each (instead of --run): "
                             "only the LLM work those processes did is counted")
    parser.add_argument("--wall", type=float, help="the command's own wall seconds, if measured around it")
    parser.add_argument("--cpu-s", type=float, help="the run process's CPU seconds (user + sys), if measured")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and windows (a smoke run)")
    parser.add_argument("--out", type=Path, help="JSON path (default results/bench/compute_bound-<stamp>.json)")
    args = parser.parse_args()
    result = bench_compute_bound(args.run, quick=args.quick, wall_s=args.wall, cpu_s=args.cpu_s, shards=args.shards)
    out = args.out or ROOT / "results" / "bench" / f"compute_bound-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"cpu: {result['cpu']['model_name']}; flags: {' '.join(result['cpu']['vector_flags'])}")
    for name, value, goal in report_rows(result):
        print(f"{name:50s} {'-' if value is None else f'{value:10.3f}':>10}  {goal}")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
