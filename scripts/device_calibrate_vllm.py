"""Calibrate the GPU-time estimate's constants (scripts/gpu_estimate.py) on a GPU with vLLM: at most 5 minutes.

    python -m scripts.device_calibrate_vllm --model Qwen/Qwen2.5-1.5B-Instruct --name qwen2.5-1.5b \
        --out results/device/<date>/vllm_constants.json [--url http://127.0.0.1:8000]
    python -m scripts.gpu_estimate --constants results/device/<date>/vllm_constants.json

Starts vLLM on the model (scgmem/llm/served/launchers/vllm.py's flags; or uses --url) and measures, with
random-text prompts and a fresh cache_salt per request (nothing served from the prefix cache):
- decode seconds per token at batch 1 (256 tokens, ignore_eos) and at 8 and 32 requests at once (the
  batch slope: step(c) = step(1) x (1 + slope (c - 1)));
- prefill tokens/s: a 4,096-token prompt with max_tokens 1, minus a 16-token one;
- a constrained request's extra seconds: a fresh Lark grammar each time against the same grammar again
  (whether vLLM compiles an identical grammar twice shows as the difference).
The JSON holds `constants` in gpu_estimate's shape for `--name` (low = high = the measured value), the
device and vLLM version. Not run on the CPU machine this was written on (no GPU there).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scgmem.llm.served.http_client import JsonClient

DEADLINE_S = 300


def words(n: int, rand: random.Random) -> str:
    return " ".join(rand.choice(("alpha", "river", "seven", "blue", "market", "quiet", "stone", "late"))
                    for _ in range(n))


def timed(client: JsonClient, body: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    reply = client.post("/v1/completions", {**body, "cache_salt": f"cal-{time.time_ns()}-{random.random()}"})
    return time.perf_counter() - start, reply


def calibrate(client: JsonClient, model: str) -> dict:
    rand, t0 = random.Random(0), time.monotonic()
    base = {"model": model, "temperature": 0, "ignore_eos": True}

    def decode_step(concurrency: int) -> float:
        body = {**base, "prompt": words(8, rand), "max_tokens": 256}
        with ThreadPoolExecutor(concurrency) as pool:
            took = list(pool.map(lambda _: timed(client, body)[0], range(concurrency)))
        return statistics.median(took) / 256

    timed(client, {**base, "prompt": "warm up", "max_tokens": 16})
    steps = {c: decode_step(c) for c in (1, 8, 32)}
    long_s = statistics.median(timed(client, {**base, "prompt": words(4096, rand), "max_tokens": 1})[0] for _ in range(3))
    short_s = statistics.median(timed(client, {**base, "prompt": words(16, rand), "max_tokens": 1})[0] for _ in range(3))
    tokens = timed(client, {**base, "prompt": words(4096, rand), "max_tokens": 1})[1]["usage"]["prompt_tokens"]
    grammar = 'start: "key" NAME\nNAME: /[a-z]{1,8}/\n'
    fresh = [timed(client, {**base, "prompt": "k", "max_tokens": 4,
                            "structured_outputs": {"grammar": grammar.replace("key", f"key{i}")}})[0] for i in range(5)]
    same = [timed(client, {**base, "prompt": "k", "max_tokens": 4, "structured_outputs": {"grammar": grammar}})[0]
            for _ in range(5)]
    plain = [timed(client, {**base, "prompt": "k", "max_tokens": 4})[0] for _ in range(5)]
    slope = max(0.0, (steps[32] / steps[1] - 1) / 31)
    return {"decode_s_per_token": steps, "prefill_tokens_per_s": tokens / max(long_s - short_s, 1e-6),
            "batch_slope": slope, "constrained_fresh_s": statistics.median(fresh),
            "constrained_same_grammar_s": statistics.median(same), "unconstrained_s": statistics.median(plain),
            "seconds": round(time.monotonic() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True, help="the estimate's model name, e.g. qwen2.5-1.5b")
    ap.add_argument("--url", help="a vLLM already up (its root); else one is started here")
    ap.add_argument("--port", type=int, default=18250)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    proc = None
    if not args.url:
        from scgmem.llm.served.launchers.vllm import start

        proc = start(args.port, model=args.model, served_name=args.model, dtype="bfloat16", wait_s=150,
                     log=args.out.with_suffix(".vllm.log"))
    root = args.url or f"http://127.0.0.1:{args.port}"
    try:
        measured = calibrate(JsonClient(root, timeout_s=DEADLINE_S, retries=0), args.model)
    finally:
        if proc is not None:
            from scgmem.llm.served.launchers.launch import stop_process

            stop_process(proc)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip()
    step = measured["decode_s_per_token"][1]
    out = {"device": gpu, "model": args.model, "measured": measured,
           "constants": {"decode_s_batch1": {args.name: (step, step)},
                         "prefill_tokens_per_s": {args.name: measured["prefill_tokens_per_s"]},
                         "batch_slope": measured["batch_slope"], "h100_speedup": (1.0, 1.0),
                         "grammar_compile_s": max(0.0, measured["constrained_fresh_s"] - measured["unconstrained_s"])}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["constants"]))


if __name__ == "__main__":
    main()
