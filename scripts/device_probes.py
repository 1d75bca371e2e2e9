"""The device check's probes (issue 26, items 4-6), each one JSON-able dict, run by
scripts/device_check.py and written to OUT/probes.json as soon as each is measured:

* `real_tokenizer_probe`: tiny random models with Llama 3.2's and Qwen2.5's real vocabularies
  and templates (scgmem/llm/doubles/tiny_real_models.py) load, generate and decode under the schema
  constraint on the device: EOS ids, pad, score dtype.
* `long_context_probe`: one full-context batch of ~26K-token prompts (LoCoMo's longest
  transcripts) at the loaded paper config's own max_batch_tokens / prefix-cache sizes:
  rows per batch, peak device memory, prefill seconds, ms per decode step.
* `batch_invariance_probe`: the same prompts generated one row at a time without the prefix
  cache, and batched (padded, sharing a cached prefix): greedy-token agreement and the largest
  |delta log-prob| of the rows whose tokens agree.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

QUESTIONS = ["When did Caroline go to the LGBTQ support group?", "What does Melanie paint?",
             "Which city did Caroline move from, and when did she tell Melanie about it?",
             "What are Melanie's kids' hobbies?", "What did Caroline research?", "Who supports Caroline?",
             "When did Melanie run a charity race for mental health, and with whom?", "What is Caroline's job?"]


def _peak_reset(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None


def transcript(llm, corpus: list[str], tokens: int) -> str:
    """LoCoMo lines repeated until the text holds about `tokens` tokens of `llm`'s tokenizer."""
    lines, count, i = [], 0, 0
    while count < tokens:
        line = corpus[i % len(corpus)]
        lines.append(line)
        count += llm.count_tokens(line) + 1
        i += 1
    return "\n".join(lines)


def real_tokenizer_probe(device: str, work: Path) -> dict:
    from scgmem.core.decoding import generate_keys
    from scgmem.core.schema import CognitiveSchema
    from scgmem.llm import LLM
    from scgmem.llm.doubles.tiny_real_models import build_tiny_real_model

    out = {}
    dtype = "float32" if device == "cpu" else "bfloat16"
    for family in ("llama3.2", "qwen2.5"):
        start = time.perf_counter()
        folder = build_tiny_real_model(family, Path(work) / family)
        llm = LLM(name=family, path=str(folder), dtype=dtype, device=device, context_window=4096, memo_entries=0)
        gens = llm.generate([llm.render(q) for q in QUESTIONS[:4]], max_new_tokens=8)
        schema = CognitiveSchema(llm.encode, llm.vocab_size, forbidden_ids=llm.eos_token_ids)  # score columns
        for concept in ("support group", "hiking", "pottery", "adoption agencies"):
            schema.add(concept)
        keys, _ = generate_keys(llm, schema, [llm.render(q, assistant_prefix="Keywords:") for q in QUESTIONS[:2]],
                                max_keys=2)
        out[family] = {"ok": all(len(g[0].token_ids) <= 8 for g in gens) and all(k[0].tracked for k in keys),
                       "tokens": len(llm.tokenizer), "score_columns": llm.vocab_size, "eos_ids": llm.eos_token_ids,
                       "pad_token": llm.tokenizer.pad_token, "score_dtype": llm.score_dtype,
                       "keys": [[k.concept for k in row[0].keys] for row in keys],
                       "probe": llm.generation_report()["chat_template"]["probe"][:200],
                       "wall_s": round(time.perf_counter() - start, 2)}
        del llm
    return {"ok": all(v["ok"] for v in out.values()), **out}


def long_context_probe(llm, corpus: list[str], meter, device: str, tokens: int = 26000, new: int = 8) -> dict:
    """One full-context batch at the loaded config's max_batch_tokens (rows sharing the transcript)."""
    text = transcript(llm, corpus, tokens)
    rows = max(1, min(llm.batch_size, llm.max_batch_tokens // (tokens + new + 256)))
    prompts = [llm.render(f"{text}\n\nQuestion: {q}") for q in (QUESTIONS * rows)[:rows]]
    memo, llm.memo = llm.memo, None
    meter.reset()
    _peak_reset(device)
    start = time.perf_counter()
    try:
        gens = llm.generate(prompts, max_new_tokens=new)
    finally:
        llm.memo = memo
    wall = time.perf_counter() - start
    steps = meter.decode_tokens / max(1, meter.generate_rows) * max(1, meter.generate_calls)  # decode forwards
    return {"ok": all(len(g[0].token_ids) <= new for g in gens), "prompt_tokens": gens[0][0].n_prompt_tokens,
            "rows": rows, "max_batch_tokens": llm.max_batch_tokens, "batch_size": llm.batch_size,
            "prefix_cache_max_tokens": getattr(llm.prefix_cache, "max_tokens", None),
            "generate_calls": meter.generate_calls, "new_tokens": new, "wall_s": round(wall, 2),
            "prefill_s": round(meter.prefill_s, 3),
            "decode_ms_per_step": round(1000 * meter.decode_s / steps, 2) if steps else None,
            "peak_memory_gib": _peak_gib(device)}


def batch_invariance_probe(llm, corpus: list[str], new: int = 16, prefix_tokens: int = 600) -> dict:
    """Single rows (no prefix cache) against one padded batch sharing a cached prefix."""
    shared = transcript(llm, corpus, prefix_tokens)
    prompts = [llm.render(f"{shared}\n\nQuestion: {q}") for q in QUESTIONS]
    memo, cache, batch_size = llm.memo, llm.prefix_cache, llm.batch_size
    llm.memo = None
    try:
        llm.generate(prompts, max_new_tokens=new)  # fills the prefix cache
        before = _cached(llm)
        batched = [g[0] for g in llm.generate(prompts, max_new_tokens=new)]
        cached = _cached(llm) - before
        llm.prefix_cache, llm.batch_size = None, 1
        single = [llm.generate([p], max_new_tokens=new)[0][0] for p in prompts]
    finally:
        llm.memo, llm.prefix_cache, llm.batch_size = memo, cache, batch_size
    same = [a.token_ids == b.token_ids for a, b in zip(single, batched)]
    agree_tokens = sum(next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y),
                           min(len(a.token_ids), len(b.token_ids))) for a, b in zip(single, batched))
    total = sum(max(len(a.token_ids), len(b.token_ids)) for a, b in zip(single, batched))
    deltas = [abs(a.logprob - b.logprob) for a, b, s in zip(single, batched, same) if s]
    return {"ok": True, "rows": len(prompts), "new_tokens": new, "rows_identical": sum(same),
            "row_agreement": round(sum(same) / len(same), 4),
            "token_agreement_before_first_difference": round(agree_tokens / max(1, total), 4),
            "max_abs_delta_logprob_identical_rows": round(max(deltas), 6) if deltas else None,
            "batched_prompt_tokens_from_prefix_cache": cached}


def _cached(llm) -> int:
    return sum(c["cached_prompt_tokens"] for c in llm.usage._counts.values())
