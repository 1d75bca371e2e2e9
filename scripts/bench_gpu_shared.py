"""Aggregate decode throughput of 1 vs N jobs at once on one GPU (issue 29, lever 3).

    python -m scripts.bench_gpu_shared --out OUT_DIR [--shape llama3.2-1b] [--jobs 1,4] [--rows 8]
        [--prompt 512] [--new 128] [--rounds 4]
    python -m scripts.bench_gpu_shared --out OUT_DIR --dry-run   # CPU: tiny shape, 1 and 2 jobs, a few tokens

One run keeps an H200 busy about a quarter of the time (a decode step waits on the host), so
Table 1's 24 runs should go faster several at a time (`+launcher=gpu_shared`). Here each job
is its own process, as under that launcher, placed exactly as the harness places it
(`scgmem.harness.gpu_sharing.place_job` with `run.jobs_per_gpu` = N and pinning: memory settings
divided by N, the process capped at 1/N of the GPU's memory). Every job loads the same
random-weight model of a paper shape (scripts/device_check.py builds it) and makes `--rounds`
`LLM.generate` calls of `--rows` greedy prompts (prefix cache and memo off: pure prefill + decode).
The jobs wait at a barrier after loading, so the clock covers generation only: throughput is all
jobs' generated tokens / (last job's end - the barrier). Start MPS first to measure with it
(`nvidia-cuda-mps-control -d`); the JSON records whether its pipe folder exists.

Writes OUT_DIR/gpu_shared.json after each N (a timeout keeps what was measured), with
`speedup` = throughput at N / throughput at 1 (the goal: >= 2.5 at N = 4 on an H200).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prompts_for(llm, corpus: list[str], rows: int, length: int) -> list[str]:
    """`rows` different chat prompts of about `length` tokens (LoCoMo lines, each row from its own offset)."""
    out = []
    for r in range(rows):
        lines, n, i = [], 0, r * 7
        while n < length:
            line = corpus[i % len(corpus)]
            lines.append(line)
            n += llm.count_tokens(line) + 1
            i += 1
        out.append(llm.render("\n".join(lines) + "\nSummarise the conversation above."))
    return out


def worker(args) -> None:
    """One job: load, wait at the barrier, generate, print one JSON line."""
    from scripts.device_check import locomo_text

    from scgmem.harness.gpu_sharing import claim_gpu, place_job, visible_gpus
    from scgmem.llm import LLM

    model = {"device": "cpu" if args.dry_run else "cuda", "batch_size": args.rows,
             "max_batch_tokens": args.rows * (args.prompt + 64) * args.jobs, "prefix_cache_max_tokens": 16384}
    model, _, placement = place_job(model, {}, job_num=args.worker, jobs_per_gpu=args.jobs, pin_gpus=True,
                                    n_gpus=visible_gpus())
    claim_gpu(placement)
    llm = LLM(name=args.shape, path=args.model_dir, context_window=args.prompt * 2 + args.new + 256,
              dtype="float32" if args.dry_run else "bfloat16", memo_entries=0, prefix_cache=False, **model)
    prompts = prompts_for(llm, locomo_text(ROOT / "data" / "locomo10.json"), args.rows, args.prompt)
    llm.generate(prompts[:1], max_new_tokens=2)  # warm-up: kernels chosen, allocator primed
    barrier = Path(args.barrier)
    (barrier / f"ready{args.worker}").touch()
    while len(list(barrier.glob("ready*"))) < args.jobs:
        time.sleep(0.005)
    start = time.time()
    tokens = 0
    for _ in range(args.rounds):
        outs = llm.generate(prompts, max_new_tokens=args.new)
        tokens += sum(len(g[0].token_ids) for g in outs)
    if llm.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    print(json.dumps({"job": args.worker, "start": start, "end": time.time(), "generated_tokens": tokens,
                      "placement": placement, "oom": llm.oom.report()}))


def measure(args, jobs: int, model_dir: Path, scratch: Path) -> dict:
    barrier = scratch / f"barrier{jobs}"
    barrier.mkdir(parents=True, exist_ok=True)
    common = [f"--{k}={getattr(args, k)}" for k in ("shape", "rows", "prompt", "new", "rounds")]
    procs = [subprocess.Popen([sys.executable, "-m", "scripts.bench_gpu_shared", "--worker", str(n), f"--jobs={jobs}", f"--model-dir={model_dir}",
                               f"--barrier={barrier}", *common, *(["--dry-run"] if args.dry_run else [])],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(jobs)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=args.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"a job of {jobs} failed ({proc.returncode}):\n{err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    tokens = sum(r["generated_tokens"] for r in results)
    return {"jobs": jobs, "generated_tokens": tokens, "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 1), "per_job": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--shape", default="llama3.2-1b")
    parser.add_argument("--jobs", default="1,4", help="comma list of jobs at once (worker mode: this run's N)")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens per row")
    parser.add_argument("--new", type=int, default=128, help="generated tokens per row (at most)")
    parser.add_argument("--rounds", type=int, default=4, help="generate calls per job")
    parser.add_argument("--timeout", type=int, default=400, help="seconds per N")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shape, 1 and 2 jobs, a few tokens")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--barrier", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        args.jobs = int(args.jobs)
        worker(args)
        return 0
    if args.out is None:
        parser.error("--out is required")
    if args.dry_run:
        args.shape, args.jobs, args.rows, args.prompt, args.new, args.rounds = "tiny", "1,2", 2, 32, 4, 1
    import torch
    from scripts.device_check import SHAPES, build_model_dir, locomo_text

    if args.shape not in SHAPES:
        parser.error(f"--shape {args.shape!r} is not one of {sorted(SHAPES)}")
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: use --dry-run on a CPU")
    args.out.mkdir(parents=True, exist_ok=True)
    # absolute: the workers run in ROOT, which is not this process's folder when ROOT is reached by a link
    scratch = (args.out / "gpu_shared_scratch").resolve()
    model_dir = build_model_dir(args.shape, SHAPES[args.shape], locomo_text(ROOT / "data" / "locomo10.json"),
                                scratch / args.shape, device)
    report = {"shape": args.shape, "rows": args.rows, "prompt_tokens": args.prompt, "new_tokens": args.new,
              "rounds": args.rounds, "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
              "mps": Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")).exists(), "runs": []}
    path = args.out / "gpu_shared.json"
    for jobs in [int(j) for j in str(args.jobs).split(",")]:
        run = measure(args, jobs, model_dir, scratch)
        report["runs"].append(run)
        base = report["runs"][0]["tokens_per_s"]
        run["speedup"] = round(run["tokens_per_s"] / base, 3)
        path.write_text(json.dumps(report, indent=2) + "\n")  # each N as soon as it is measured
        print(f"{jobs} job(s): {run['tokens_per_s']} tokens/s aggregate ({run['speedup']}x one job)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
