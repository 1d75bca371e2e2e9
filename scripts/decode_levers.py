"""Decode-step time per lever (issue 29): attention implementation x decode mode x rows x prompt.

Used by scripts/device_throughput.py (`--levers`). For every (attention, mode, prompt, rows), greedy
`LLM.generate` runs `new` tokens and 1 token on distinct prompts (EOS suppressed, prefix cache and
memo off); ms per decode step = (t(new) - t(1)) / (new - 1), so prefill and per-call costs cancel.
A first call at each shape is not timed: it pays compilation (reported as `first_call_s`).

  attention  sdpa            transformers' own (eager decode packs query heads; compiled decode and
                             masked prefill repeat K/V per query head)
             gqa_sdpa        the harness's, no K/V copies (scgmem/llm/local/gqa_attention.py)
             repeat_kv_sdpa  K/V repeated at every call (what compiled `sdpa` does), for reference
  mode       eager           DynamicCache, no compile (the harness's default)
             static          StaticCache, no compile (scgmem/llm/local/static_decode.py)
             compiled        StaticCache + torch.compile of the decode step (CUDA graphs on a GPU)
"""
from __future__ import annotations

import time

import torch

MODES = ("eager", "static", "compiled")
ATTENTIONS = ("sdpa", "gqa_sdpa", "repeat_kv_sdpa")


def step_ms(llm, prompts: list[str], new: int, sync) -> dict:
    """First-call seconds and ms per decode step of `prompts` (see the module docstring)."""
    from transformers import SuppressTokensLogitsProcessor

    def processors(width, rows):  # every row runs all `new` steps: random weights may pick EOS
        return [SuppressTokensLogitsProcessor(llm.eos_token_ids, device=llm.device)]

    def run(n):
        sync()
        start = time.perf_counter()
        llm.generate(prompts, max_new_tokens=n, processors=processors)
        sync()
        return time.perf_counter() - start

    first = run(new)
    one, full = min(run(1) for _ in range(2)), run(new)
    return {"first_call_s": round(first, 3), "step_ms": round(1000 * max(full - one, 0.0) / (new - 1), 3),
            "generate_s": round(full, 3)}


def measure_levers(llm, words: str, rows_list: list[int], prompt_lens: list[int], attentions: list[str],
                   modes: list[str], new: int, sync, into: dict, emit) -> None:
    """Fill `into[attention][mode][f"{prompt}x{rows}"]`, calling `emit()` after every number."""
    from scgmem.llm.local.gqa_attention import register
    from scgmem.llm.local.oom import free_cuda_cache, is_out_of_memory
    from scgmem.llm.local.static_decode import StaticDecode

    register()
    if new < 2:
        raise ValueError(f"--new must be >= 2 for a decode step time, got {new}")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"--lever-modes: {bad} not in {list(MODES)}")
    bad = [a for a in attentions if a not in ATTENTIONS]
    if bad:
        raise ValueError(f"--lever-attention: {bad} not in {list(ATTENTIONS)}")
    ids = llm.encode(words)
    while len(ids) < max(prompt_lens):  # a prompt of exactly the asked length, however short the corpus
        ids = ids + ids
    kept = (llm.model.config._attn_implementation, llm.static, llm.batch_size, llm.max_batch_tokens)
    llm.batch_size, llm.max_batch_tokens = max(rows_list), 1 << 30  # one forward batch per call
    try:
        # mode-major: every eager number before the first compile, whose time is the unknown (a device
        # session that ends mid-grid keeps the cheap cells of both attentions)
        for mode in modes:
            for attention in attentions:
                llm.model.config._attn_implementation = attention
                llm.static = None if mode == "eager" else StaticDecode(
                    llm.model, compile=mode == "compiled", max_batch_tokens=llm.max_batch_tokens,
                    reserved_bytes=llm.score_head.copy_bytes)
                cell = into.setdefault(attention, {}).setdefault(mode, {})
                for length in prompt_lens:
                    if length + new > llm.context_window:
                        cell[f"{length}x*"] = {"skipped": f"prompt + new > context_window {llm.context_window}"}
                        continue
                    base = llm.tokenizer.decode(ids[:length])
                    for rows in rows_list:
                        try:
                            got = step_ms(llm, [f"{i} {base}" for i in range(rows)], new, sync)
                        except RuntimeError as error:  # out of memory of any kind: one cell, not the grid
                            if not is_out_of_memory(error):
                                raise
                            got = {"error": f"out of memory: {str(error)[:200]}"}
                            free_cuda_cache()
                        if llm.static is not None:
                            got["static_decode"] = llm.static.report()
                        cell[f"{length}x{rows}"] = got
                        emit()
                        print(f"[levers] {attention} {mode} prompt {length} rows {rows}: {got}", flush=True)
                    if llm.static is not None:
                        llm.static.caches.clear()  # a long prompt's caches are the largest buffers
    finally:
        llm.model.config._attn_implementation, llm.static, llm.batch_size, llm.max_batch_tokens = kept


def ratios(levers: dict) -> dict:
    """Each (attention, mode) cell's step time over the harness's former default (sdpa, eager)."""
    base = levers.get("sdpa", {}).get("eager", {})
    out = {}
    for attention, modes in levers.items():
        for mode, cells in modes.items():
            for key, cell in cells.items():
                ref = base.get(key, {}).get("step_ms")
                if ref and cell.get("step_ms") is not None:
                    out.setdefault(f"{attention}/{mode}", {})[key] = round(cell["step_ms"] / ref, 3)
    return out
