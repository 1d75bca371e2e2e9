"""Table 1's H100-hours on vLLM, estimated from the run's own requests and published engine speeds.

    .venv/bin/python -m scripts.gpu_estimate [--constants results/device/<calibration>.json] [--json out.json]
    make reproduce-times BACKEND=vllm

Inputs (nothing is run or timed here):
- the requests of Table 1 on all of conv-26 through vLLM (results/served/conv26_vllm/runs/table1/<method>/
  requests.jsonl.gz: the embedded SmolLM2-135M's replies, so **answer and key lengths are the embedded
  model's**, not the paper models'; prompt lengths are the prompts the methods built from those replies);
- published speeds (CONSTANTS, each with its source, hardware and engine version; docs/performance.md,
  "GPU-time estimate"), or a calibration written by scripts/device_calibrate_vllm.py (`--constants`).

Cost model of one request on one GPU, in seconds: its uncached prompt tokens / prefill rate + its
generated tokens x the decode step at the concurrency it runs at (+ a per-request overhead in the high
case: a grammar compile for each constrained request). A job (one model, one method, all of LoCoMo,
`run.parallel_conversations=10`) takes at least the larger of two bounds:
- throughput: every request's prefill plus its decode tokens shared among the sequences in flight
  (concurrency = 10 x the run's mean requests in flight, at most 64), step time growing with batch;
- chain: the longest chain of requests one after another (the happens-before chain of the recording:
  each request after one that ended before it started), each at batch-1 latency, of the longest
  conversation (conv-26's chain scaled by the longest conversation's turns and questions).
Uncached prompt tokens: the part of each prompt not shared with an earlier prompt of the run (the
longest common prefix, in characters, with any earlier prompt: vLLM's automatic prefix cache keeps such
heads while memory allows). Scaled from conv-26 to LoCoMo: ingest-phase requests by turns, question-phase
requests (those whose prompt holds one of conv-26's questions) by scored questions.
Low end: an H100 twice as fast as the A100 of the measurements, the prefix cache used, no per-request
overhead. High end: an H100 no faster than that A100, no prefix cache, a grammar compile per constrained
request. Every number is an ESTIMATE; scripts/device_calibrate_vllm.py measures the constants on a GPU.
"""
from __future__ import annotations

import argparse
import bisect
import gzip
import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "results" / "served" / "conv26_vllm" / "runs" / "table1"
COSTS = ROOT / "results" / "served" / "conv26_vllm" / "request_costs.json.gz"  # method_profile of each method
METHODS = ("scgmem", "full_context", "rag", "rag_locomo", "memorybank", "readagent", "amem", "memgpt")
MODELS = ("qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b")
QWEN = "QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst (commit 010c37c): A100 80GB, vLLM 0.6.3, BF16, batch 1, 2,048 tokens generated"


def _prefill_rate(speed_1: float, speed_6144: float) -> float:
    """Prefill tokens/s implied by the Qwen table: the extra time of a 6,144-token prompt over a 1-token
    one, both generating 2,048 tokens (a lower bound: longer attention during decode is counted too)."""
    return 6144 / (2048 / speed_6144 - 2048 / speed_1)


# Published measurements; every value names its source (docs/performance.md lists them with hardware and engine).
CONSTANTS = {
    "decode_s_batch1": {  # (low, high) seconds per generated token at batch 1, A100 80GB
        "qwen2.5-1.5b": (1 / 183.33, 1 / 183.33), "qwen2.5-3b": (1 / 127.61, 1 / 127.61),
        # no published Llama 3.2 row on this engine: 1B between Qwen2.5-0.5B and -1.5B, 3B as Qwen2.5-3B x 3.21/3.09 params
        "llama3.2-1b": (1 / 311.55, 1 / 183.33), "llama3.2-3b": (1 / 127.61, 3.21 / 3.09 / 127.61)},
    "prefill_tokens_per_s": {  # lower bounds (above), A100 80GB
        "qwen2.5-1.5b": _prefill_rate(183.33, 176.68), "qwen2.5-3b": _prefill_rate(127.61, 123.15),
        "llama3.2-1b": _prefill_rate(183.33, 176.68), "llama3.2-3b": _prefill_rate(127.61, 123.15)},
    # aggregate decode throughput x6.6 at 8 concurrent requests (Llama-3.1-8B, A100 40GB, vLLM 0.23.0):
    # step(c) = step(1) x (1 + slope (c - 1)), slope = (8 / 6.6 - 1) / 7
    "batch_slope": (8 / 6.6 - 1) / 7,
    "h100_speedup": (2.0, 1.0),  # (low, high): Lambda's vLLM A100/H100 benchmark, "~2x"; 1 = no faster
    "grammar_compile_s": 0.0035,  # llguidance, a 7 KiB key grammar, measured here in-process (issue 57)
    "sources": {
        "decode_s_batch1": QWEN, "prefill_tokens_per_s": QWEN + " (input 6,144 vs 1)",
        "batch_slope": "johnmusgrave.com/p/vllm-throughput-latency-sweep-on (Llama-3.1-8B-Instruct BF16, A100 40GB, vLLM 0.23.0)",
        "h100_speedup": "github.com/LambdaLabsML/vllm-benchmark, file benchmark_v0 (H100-80GB-SXM vs A100-80GB-SXM, vLLM 0.5-0.6)",
        "grammar_compile_s": "issue 57 text: llguidance compile of a conv-42 key grammar, median of 5, this machine"},
}


def load_requests(method: str) -> list[dict]:
    with gzip.open(RUNS / method / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def prompt_text(rec: dict) -> str:
    p = rec["body"].get("prompt")
    return p if isinstance(p, str) else json.dumps(p)


def uncached_shares(records: list[dict]) -> list[float]:
    """Per request, the share of its prompt not shared with any earlier prompt (longest common prefix
    with its neighbours among the earlier prompts in sorted order, which is the longest with any)."""
    seen: list[str] = []
    out = []
    for rec in sorted(records, key=lambda r: r["start"]):
        text = prompt_text(rec)
        at = bisect.bisect_left(seen, text)
        lcp = max((len(os.path.commonprefix([text, seen[j]])) for j in (at - 1, at) if 0 <= j < len(seen)), default=0)
        out.append((id(rec), 1 - lcp / max(len(text), 1)))
        seen.insert(at, text)
    share = dict(out)
    return [share[id(r)] for r in records]


def chain(records: list[dict], cost: list[float]) -> float:
    """The costliest happens-before chain: each request after one that ended before it started."""
    order = sorted(range(len(records)), key=lambda i: records[i]["start"])
    done = sorted(order, key=lambda i: records[i]["end"])
    best, k, running = [0.0] * len(records), 0, 0.0
    for i in order:  # requests that ended before i started, in end order, fold into the running max
        while k < len(done) and records[done[k]]["end"] <= records[i]["start"]:
            running = max(running, best[done[k]])
            k += 1
        best[i] = running + cost[i]
    return max(best, default=0.0)


def locomo_scale() -> dict:
    """Turns and scored questions of conv-26, the longest conversation and all of LoCoMo."""
    from scgmem.data.locomo import load_locomo, scored_questions

    conversations, _ = load_locomo(ROOT / "data" / "locomo10.json")
    categories = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}  # configs/data: scored
    turns = {c.sample_id: sum(len(s.turns) for s in c.sessions) for c in conversations}
    questions = {c.sample_id: len(scored_questions(c, categories)) for c in conversations}
    questions_26 = [q.question for q in scored_questions(next(c for c in conversations if c.sample_id == "conv-26"),
                                                         categories)]
    return {"turns": turns, "questions": questions, "questions_26": questions_26}


def method_profile(method: str, scale: dict) -> dict:
    """What the estimate needs of each recorded request (built from the recording once, then read from
    COSTS: the recordings are 3.5 MB of gzip and the prefix search takes minutes)."""
    records = load_requests(method)
    asked = re.compile("|".join(re.escape(q) for q in scale["questions_26"] if len(q) > 12))
    span = max(r["end"] for r in records) - min(r["start"] for r in records)
    return {"mean_in_flight": sum(r["end"] - r["start"] for r in records) / max(span, 1e-9),
            "requests": [{"start": r["start"], "end": r["end"], "prompt_tokens": r.get("prompt_tokens") or 0,
                          "completion_tokens": r.get("completion_tokens") or 0,
                          "phase": "question" if asked.search(prompt_text(r)) else "ingest",
                          "uncached": round(share, 4), "kind": call_kind(r["body"])}
                         for r, share in zip(records, uncached_shares(records))]}


def call_kind(body: dict) -> str:
    """free text, constrained continuation, next tokens (beam expansion / greedy key step) or score."""
    if "structured_outputs" in body or "guided_grammar" in body:
        return "constrained"
    if "logprob_token_ids" in body:
        return "next_tokens"
    if "prompt_logprobs" in body:
        return "score"
    return "free_text"


def profiles(scale: dict, rebuild: bool = False) -> dict:
    if COSTS.is_file() and not rebuild:
        return json.loads(gzip.decompress(COSTS.read_bytes()))
    out = {m: method_profile(m, scale) for m in METHODS}
    COSTS.write_bytes(gzip.compress(json.dumps(out, separators=(",", ":")).encode(), mtime=0))
    return out


def job_hours(profile: dict, scale: dict, model: str, end: int, constants: dict) -> dict:
    """Hours of one Table 1 job (one model, one method, all of LoCoMo) at the low (0) or high (1) end."""
    t1 = constants["decode_s_batch1"][model][end] / constants["h100_speedup"][end]
    prefill = constants["prefill_tokens_per_s"][model] * constants["h100_speedup"][end]
    recs = profile["requests"]
    conc = min(64.0, 10 * max(1.0, profile["mean_in_flight"]))
    step = t1 * (1 + constants["batch_slope"] * (conc - 1))
    t = scale["turns"]
    q = scale["questions"]
    factor = {"ingest": sum(t.values()) / t["conv-26"], "question": sum(q.values()) / q["conv-26"]}
    longest = {"ingest": max(t.values()) / t["conv-26"], "question": max(q.values()) / q["conv-26"]}
    terms = {"prefill": 0.0, "decode": 0.0, "overhead": 0.0}
    latency = []
    for r in recs:
        ph = r["phase"]
        prompt = r["prompt_tokens"] * (r["uncached"] if end == 0 else 1.0)
        gen = r["completion_tokens"]
        over = constants["grammar_compile_s"] if end == 1 and r["kind"] == "constrained" else 0.0
        terms["prefill"] += factor[ph] * prompt / prefill
        terms["decode"] += factor[ph] * gen * step / conc
        terms["overhead"] += factor[ph] * over
        latency.append((prompt / prefill + gen * t1 + over) * longest[ph])
    throughput_s = sum(terms.values())
    chain_s = chain(recs, latency)
    return {"hours": max(throughput_s, chain_s) / 3600, "throughput_h": throughput_s / 3600,
            "chain_h": chain_s / 3600, "bound": "chain" if chain_s > throughput_s else "throughput",
            "terms_h": {k: round(v / 3600, 4) for k, v in terms.items()}, "concurrency": round(conc, 1)}


def estimate(constants: dict = CONSTANTS, methods=METHODS, rebuild: bool = False) -> dict:
    scale = locomo_scale()
    known = profiles(scale, rebuild)
    jobs = {(model, m, end): job_hours(known[m], scale, model, end, constants)
            for model in MODELS for m in methods for end in (0, 1)}
    total = [sum(jobs[(model, m, end)]["hours"] for model in MODELS for m in methods) for end in (0, 1)]
    per_method = {m: {"low_h": round(sum(jobs[(model, m, 0)]["hours"] for model in MODELS), 3),
                      "high_h": round(sum(jobs[(model, m, 1)]["hours"] for model in MODELS), 3),
                      "bound_high": jobs[(MODELS[1], m, 1)]["bound"],
                      "terms_high_qwen3b_h": jobs[(MODELS[1], m, 1)]["terms_h"],
                      "chain_high_qwen3b_h": round(jobs[(MODELS[1], m, 1)]["chain_h"], 4),
                      "requests_conv26": len(known[m]["requests"])} for m in methods}
    return {"table1_h100_hours": {"low": round(total[0], 2), "high": round(total[1], 2)}, "methods": per_method,
            "models": list(MODELS), "scale": {"turns": scale["turns"], "questions": scale["questions"]},
            "constants": {k: v for k, v in constants.items()}}


def print_estimate(result: dict) -> None:
    total = result["table1_h100_hours"]
    print(f"Table 1 on vLLM, 4 models x {len(result['methods'])} methods x all of LoCoMo: "
          f"{total['low']:.2f}-{total['high']:.2f} H100-hours (estimate; goal <= 4)")
    print("| method | H100-hours low | high | bound (high, qwen2.5-3b) | prefill / decode / overhead h (high, qwen2.5-3b) |")
    print("|---|---:|---:|---|---|")
    for m, row in result["methods"].items():
        terms = row["terms_high_qwen3b_h"]
        print(f"| {m} | {row['low_h']:.3f} | {row['high_h']:.3f} | {row['bound_high']} "
              f"(chain {row['chain_high_qwen3b_h']:.3f} h) | {terms['prefill']:.3f} / {terms['decode']:.3f} / "
              f"{terms['overhead']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--constants", type=Path, help="a calibration JSON (scripts/device_calibrate_vllm.py)")
    ap.add_argument("--json", type=Path, help="write the estimate here too")
    ap.add_argument("--rebuild", action="store_true", help=f"rebuild {COSTS.name} from the recordings (minutes)")
    args = ap.parse_args()
    constants = dict(CONSTANTS)
    if args.constants:  # a calibration names one model: its values replace that model's, the rest stay
        for key, value in json.loads(args.constants.read_text())["constants"].items():
            constants[key] = {**constants[key], **value} if isinstance(value, dict) else value
    result = estimate(constants, rebuild=args.rebuild)
    print_estimate(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
