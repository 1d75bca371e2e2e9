"""SCG-Mem on a serving engine against the local backend, on this CPU (`make bench`, part `served`;
alone: `make bench-served`; BENCH_TINY=1: a smoke run of 2 turns, 1 question, one grammar size;
BENCH_OUT=<dir>: where the JSON goes, default results/bench). Starts llama.cpp's own server (xllamacpp, the bundled Q4_1 GGUF, 4 slots,
1 thread) on 127.0.0.1 and measures, in one run:

  grammar         per schema size (10 .. 5,000 concepts): the client's Lark text build (ms), one
                  grammar-constrained key request on the server (ms, median of 3), and that minus the
                  same request under a one-key grammar (the server's grammar compile, estimated)
  ingest          SCG-Mem's ingestion of conv-26 session 1 (assimilation, accommodation), local vs
                  served, wall seconds and their ratio; the server's requests and requests in flight
  recall          constrained beam search (b=5) for the session's questions, local vs served

The server runs the Q4_1 weights with llama.cpp's kernels and the local backend the de-quantised
ones in fp32 torch, each on one thread: the ratio is what a user of this CPU sees, not an engine
comparison on a GPU.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from scripts.bench_inputs import ROOT, Scale, concept_pool, conversation, load_llm
from scgmem.llm.served.launchers.launch import free_port

SIZES = (10, 100, 1000, 5000)
TOKENIZER = Path.home() / ".cache" / "scgmem" / "models" / "SmolLM2-135M-Instruct.Q4_1"


def bench_grammar(llm, pool, sizes=SIZES) -> dict:
    from scgmem.core.decoding import key_end_id
    from scgmem.core.schema import CognitiveSchema
    from scgmem.llm.key_rule import KeyRule
    from scgmem.llm.served.lark_trie import key_grammar
    from scgmem.llm.served.engines.llamacpp import LlamaCppDialect

    dialect = LlamaCppDialect("bench")
    prompt = llm.encode(llm.render("Extract the 3 to 5 most important keywords of this message, separated by "
                                   "commas.\n\nMessage: Caroline: I went to a support group yesterday.",
                                   assistant_prefix="Keywords:"))
    pool_words = concept_pool(max(sizes))

    def request_ms(grammar: str, max_tokens: int) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            pool.post(*dialect.continue_body(prompt, grammar, max_tokens=max_tokens, temperature=0.0, seed=0))
            times.append(1000 * (time.perf_counter() - t))
        return statistics.median(times)

    out = {}
    for n in sizes:
        schema = CognitiveSchema(llm.encode, llm.vocab_size, forbidden_ids=llm.eos_ids)
        for word in pool_words[:n]:
            schema.add(word)
        t = time.perf_counter()
        grammar = key_grammar(KeyRule(schema.trie, terminator=schema.terminator, eos_ids=[key_end_id(llm)]))
        build_ms = 1000 * (time.perf_counter() - t)
        one = CognitiveSchema(llm.encode, llm.vocab_size, forbidden_ids=llm.eos_ids)
        one.add(pool_words[0])
        small = key_grammar(KeyRule(one.trie, terminator=one.terminator, eos_ids=[key_end_id(llm)]))
        full_ms = request_ms(grammar, schema.trie.max_depth)
        base_ms = request_ms(small, schema.trie.max_depth)
        out[str(n)] = {"concepts": len(schema), "grammar_rules": grammar.count("\n"), "grammar_bytes": len(grammar),
                       "client_build_ms": round(build_ms, 2), "server_request_ms": round(full_ms, 1),
                       "one_key_request_ms": round(base_ms, 1), "server_compile_ms_est": round(full_ms - base_ms, 1)}
        print(f"grammar {n:>5} concepts: build {build_ms:7.1f} ms, request {full_ms:7.1f} ms "
              f"(one-key grammar {base_ms:6.1f} ms)", flush=True)
    return out


def bench_slice(llm, served, conv, questions) -> dict:
    from scgmem.core.method import SCGMem
    from scgmem.core.recall import constrained_seeds

    out = {}
    methods = {}
    for name, model in (("local", llm), ("served", served)):
        method = SCGMem(model, None)
        t = time.perf_counter()
        method.ingest(conv, np.random.default_rng(0))
        out[f"ingest_{name}_s"] = round(time.perf_counter() - t, 2)
        methods[name] = method
        t = time.perf_counter()
        constrained_seeds(model, method.schema, questions, num_beams=5)
        out[f"recall_{name}_s"] = round(time.perf_counter() - t, 2)
    out["ingest_served_over_local"] = round(out["ingest_served_s"] / out["ingest_local_s"], 2)
    out["recall_served_over_local"] = round(out["recall_served_s"] / out["recall_local_s"], 2)
    out["schema_sizes"] = {k: len(m.schema) for k, m in methods.items()}
    out["turns"], out["questions"] = len(conv.turns), len(questions)
    out["server_requests"] = served.constrained.requests
    out["requests_in_flight_max"] = served.max_concurrency
    return out


def bench_served(scale: Scale = Scale("full"), port: int | None = None) -> dict:
    """The grammar sizes and the slice, on a server started on `port` (default: a free one)."""
    import torch

    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM
    from scgmem.llm.served.launchers.llamacpp import bundled_gguf, start

    torch.set_num_threads(1)
    llm = load_llm()
    port = port or free_port()
    proc = start(port, slots=4, threads=1, wait_s=60)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        served = OpenAICompatibleLLM(url, str(bundled_gguf()), tokenizer=str(TOKENIZER), engine="llamacpp",
                                     api="completions", max_concurrency=4, name="smollm2-135m-llamacpp")
        result = {"grammar": bench_grammar(llm, served.pool, scale.pick(SIZES, SIZES[:3], SIZES[:1]))}
        conv = conversation("conv-26", sessions=1, turns=scale.pick(None, None, 2))
        questions = [qa.question for qa in conv.qa][:scale.pick(10, 3, 1)]
        result["slice"] = bench_slice(llm, served, conv, questions)
        print(f"served/local: ingest {result['slice']['ingest_served_over_local']}x, "
              f"recall {result['slice']['recall_served_over_local']}x", flush=True)
        return result
    finally:
        proc.kill()
        proc.wait(timeout=10)


def report_rows(result: dict) -> list[tuple]:
    """The lines `make bench` prints for this part."""
    sl = result["slice"]
    rows = [("served/local ingest wall, conv-26 s1", sl["ingest_served_over_local"], ""),
            ("served/local recall wall (b=5)", sl["recall_served_over_local"], ""),
            ("  requests in flight (max)", sl["requests_in_flight_max"], ""),
            ("  server requests (ingest + recall)", sl["server_requests"], "")]
    rows += [(f"  grammar, {n} concepts: request ms", g["server_request_ms"], "") for n, g in result["grammar"].items()]
    return rows


if __name__ == "__main__":
    import json
    import os
    from datetime import datetime

    port = os.environ.get("BENCH_SERVED_PORT")
    result = bench_served(Scale("tiny" if os.environ.get("BENCH_TINY") == "1" else
                                "quick" if os.environ.get("BENCH_QUICK") == "1" else "full"), int(port) if port else None)
    folder = Path(os.environ.get("BENCH_OUT", ROOT / "results" / "bench"))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-served.json"
    out.write_text(json.dumps(result, indent=1))
    for name, value, _ in report_rows(result):
        print(f"{name:45s} {value:10.3f}")
    print(f"wrote {out}")
