"""Per-shape decode/prefill timings of the harness's backend on a device (random weights).

    python -m scripts.device_throughput --out OUT_DIR [--shapes llama3.2-1b,qwen2.5-3b]

device_check.py runs every method on tiny workloads (1 session, 2 questions), so its tokens/s
mix warm-up and per-call overhead. This measures the backend itself at controlled shapes:
for each batch size, `LLM.generate` of `--new` greedy tokens on `--prompt`-token prompts
(the prefix cache off, so every row is prefilled), the raw HF forward time of one decode step,
and a torch.profiler table of one generate call (CPU vs device time: where the step goes), once
with the harness's attention kernels (`model.sdpa_backends`) and once with torch's own choice,
each over prompt lengths no earlier call had (scgmem/llm/local/attention.py says why that matters).
The timings feed the H200-hours estimate (scripts/bench_batching.py --h200-from).

With `--constrained`, each shape first gets a constrained SCG-Mem step (scripts/device_constrained.py,
issue 40); `--levers-only` skips the kernel variants and the profile (the device check's quick plan).
With `--levers`, each shape also gets the decode-lever grid of scripts/decode_levers.py (issue 29):
attention implementation (--lever-attention) x decode mode (--lever-modes: eager, static,
compiled) x rows (--batches) x prompt tokens (--lever-prompts), as ms per decode step, under
"levers" (and "lever_ratios" over sdpa/eager). throughput.json is rewritten after every number.

    python -m scripts.device_throughput --out OUT --levers --batches 1,8,32 --lever-prompts 512,2048,8192
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from scripts.device_check import SHAPES, build_model_dir, locomo_text

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, sync) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def measure_shape(name: str, args, corpus: list[str], result: dict | None = None, emit=lambda: None) -> dict:
    from scgmem.llm import LLM

    work = Path(args.work) / name
    build_model_dir(name, SHAPES[name], corpus, work / "model", args.device)
    llm = LLM(name, str(work / "model"), dtype="bfloat16" if args.device != "cpu" else "float32",
              device="auto" if args.device != "cpu" else "cpu", context_window=SHAPES[name]["context_window"],
              batch_size=64, max_batch_tokens=1 << 20, prefix_cache=False, memo_entries=0)
    cuda = args.device != "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result = {} if result is None else result
    result.update({"shape": name, "device_map": str(getattr(llm.model, "hf_device_map", None)),
              "model_device": str(llm.device), "attn_implementation": llm.model.config._attn_implementation,
              "prompt_tokens": args.prompt, "new_tokens": args.new, "batches": {}})
    words = " ".join(corpus)[: args.prompt * 12]
    llm.generate([llm.tokenizer.decode(llm.encode(words)[:32])], max_new_tokens=4)  # warm-up: cuBLAS handles
    emit()
    if args.constrained:  # a constrained SCG-Mem step (issue 40): cheap, so before the compiled cells
        from scripts.device_constrained import measure_constrained

        result["constrained"] = measure_constrained(llm, corpus, sync, rows=max(args.batches))
        emit()
    harness_kernels = llm.sdpa_backends
    for variant, kernels in (("default", harness_kernels), ("torch_choice", None)):
        if (args.cprofile and variant != "default") or args.levers_only:
            continue
        llm.sdpa_backends = kernels
        # each variant gets prompt lengths no earlier call had: a kernel that plans per shape
        # (cuDNN attention) pays its planning here as it would in a real run
        prompt = args.prompt + (0 if variant == "default" else 97)
        ids = llm.encode(words)[:prompt]
        base = llm.tokenizer.decode(ids)
        result["batches"].setdefault(variant, {})
        for batch in args.batches:
            measure_batch(llm, result["batches"][variant], name, variant, batch, base, ids, args, sync)
            emit()
    llm.sdpa_backends = harness_kernels
    if args.levers:
        from scripts.decode_levers import measure_levers, ratios

        levers = result.setdefault("levers", {})

        def emit_levers():
            result["lever_ratios"] = ratios(levers)
            emit()
        measure_levers(llm, " ".join(corpus) * 4, args.batches, args.lever_prompts, args.lever_attention,
                       args.lever_modes, args.new, sync, levers, emit_levers)
    if args.cprofile:  # where a generate step's time goes, in Python terms
        import cProfile
        import io
        import pstats

        base = llm.tokenizer.decode(llm.encode(words)[:args.prompt])
        prompts = [f"{i} {base}" for i in range(args.batches[0])]
        enc = llm.tokenizer(prompts, return_tensors="pt", padding=True).to(llm.device)
        result["plain_hf_generate_s"] = round(timed(lambda: llm.model.generate(
            **enc, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False), sync), 3)
        profiler = cProfile.Profile()
        profiler.enable()
        llm.generate(prompts, max_new_tokens=args.new)
        sync()
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
        (Path(args.out) / f"{name}.cprofile.txt").write_text(text.getvalue())
        print(f"[throughput] {name} plain HF generate: {result['plain_hf_generate_s']} s", flush=True)
    if cuda and not args.cprofile and not args.levers_only:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            llm.generate([f"{i} {base}" for i in range(8)], max_new_tokens=16)
        table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=25)
        (Path(args.out) / f"{name}.profile.txt").write_text(table)
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    del llm
    if cuda:
        torch.cuda.empty_cache()
    return result


def measure_batch(llm, into: dict, name: str, variant: str, batch: int, base: str, ids: list[int], args, sync) -> None:
    """`LLM.generate` and the raw model's prefill and decode steps for `batch` rows of `base`,
    under the LLM's attention kernels (`llm.sdpa_backends`)."""
    from scgmem.llm.local.attention import attention_kernels

    # distinct rows (a different leading word) so no memo or identical-row shortcut applies
    prompts = [f"{i} {base}" for i in range(batch)]
    seconds = timed(lambda: llm.generate(prompts, max_new_tokens=args.new), sync)
    # the raw model: one prefill, then `steps` decode steps with the HF cache, no generate()
    enc = llm.tokenizer(prompts, return_tensors="pt", padding=True).to(llm.device)
    steps = 16
    with torch.no_grad(), attention_kernels(llm.device, llm.sdpa_backends):
        prefill = timed(lambda: llm.model(**enc, use_cache=True), sync)
        out = llm.model(**enc, use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        mask = torch.cat([enc["attention_mask"], torch.ones_like(nxt)], dim=1)

        def decode():
            nonlocal mask
            for _ in range(steps):
                llm.model(input_ids=nxt, attention_mask=mask, past_key_values=cache, use_cache=True)
                mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
        decode_s = timed(decode, sync) / steps
    into[str(batch)] = {
        "generate_s": round(seconds, 3), "generate_step_ms": round(1000 * seconds / args.new, 2),
        "generated_tokens_per_s": round(batch * args.new / seconds, 1),
        "raw_prefill_s": round(prefill, 4), "raw_prefill_tokens_per_s": round(batch * len(ids) / prefill, 1),
        "raw_decode_step_ms": round(1000 * decode_s, 2)}
    print(f"[throughput] {name} {variant} batch {batch}: {into[str(batch)]}", flush=True)

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default="llama3.2-1b,qwen2.5-3b")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--cprofile", action="store_true", help="cProfile one generate call instead")
    parser.add_argument("--work", default="/tmp/scgmem-device-throughput")
    parser.add_argument("--levers", action="store_true", help="also the decode-lever grid (scripts/decode_levers.py)")
    parser.add_argument("--lever-prompts", default="512,2048,8192")
    parser.add_argument("--lever-attention", default="sdpa,gqa_sdpa")
    parser.add_argument("--lever-modes", default="eager,compiled")
    parser.add_argument("--levers-only", action="store_true", help="skip the kernel variants and the profile")
    parser.add_argument("--constrained", action="store_true",
                        help="also a constrained SCG-Mem step (scripts/device_constrained.py), first")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.lever_prompts = [int(p) for p in args.lever_prompts.split(",")]
    args.lever_attention, args.lever_modes = args.lever_attention.split(","), args.lever_modes.split(",")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    import transformers

    corpus = locomo_text(ROOT / "data" / "locomo10.json")
    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name() if args.device != "cpu" else None}
    report = {"environment": env, "shapes": []}

    def emit():  # every number on disk as soon as it is measured (a device session may end mid-grid)
        (Path(args.out) / "throughput.json").write_text(json.dumps(report, indent=2))
    for name in args.shapes.split(","):
        report["shapes"].append({"shape": name})
        measure_shape(name, args, corpus, report["shapes"][-1], emit)
        emit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
