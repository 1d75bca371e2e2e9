"""SCG-Mem's constrained calls on vLLM over the paper models' vocabularies (issue 45, item 4).

A server of a tiny random-weight model with a real tokenizer (scgmem/llm/doubles/tiny_real_models.py)
gets a schema of `N_CONCEPTS` concepts (wider at the root than vLLM's 128 `logprob_token_ids`,
so the id chunking is exercised), greedy key lists and a beam search through the harness's own
served backend (`model=vllm`'s defaults), and plain requests for the overhead. Every number it
writes is measured in this process:

    .venv/bin/python -m experiments.vllm_vocab --family qwen2.5 --out results/served/vllm_vocab.json

starts the server itself (`.venv-vllm`), or `--url` for one already up.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

N_CONCEPTS = 320
WORDS = ("painting camping pottery adoption support group school career counseling mentorship music violin "
         "guitar piano hiking beach mountains sunset family kids dog cat horse charity race running yoga "
         "transgender pride parade conference book reading library poetry novel classic movie cinema theatre "
         "dance festival city travel trip vacation summer winter autumn spring garden flowers roses baking "
         "cooking dinner lunch breakfast coffee tea friendship wedding birthday party gift card letter job "
         "interview office team project deadline promotion salary volunteer shelter hospital doctor nurse "
         "therapy health fitness gym swimming cycling football basketball tennis chess painting_class "
         "apple banana cherry grape lemon mango orange peach pear plum bread butter cheese honey pasta pizza "
         "rice salad soup sugar window door table chair sofa lamp mirror carpet kitchen bedroom bathroom "
         "garage river lake ocean forest desert island valley bridge tower castle museum gallery market "
         "airport station harbor village farm tractor camera phone laptop tablet radio television "
         "newspaper magazine diary journal notebook pencil eraser ruler scissors glue ribbon button "
         "jacket shirt skirt dress shoes boots gloves scarf hat umbrella wallet watch necklace bracelet").split()


def concepts(n: int = N_CONCEPTS) -> list[str]:
    """`n` distinct concepts: the words, then two-word phrases of them (deterministic)."""
    out = list(dict.fromkeys(w.replace("_", " ") for w in WORDS))
    pairs = ((a, b) for a in WORDS for b in WORDS if a != b)  # finite: n <= words + words * (words - 1)
    while len(out) < n:
        phrase = " ".join(next(pairs)).replace("_", " ")
        if phrase not in out:
            out.append(phrase)
    return out[:n]


def _post(url: str, body: dict) -> tuple[dict, float]:
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as reply:
        out = json.loads(reply.read())
    return out, time.perf_counter() - start


def probe_vocabulary(url: str, folder: str, *, model_id: str | None = None, repeats: int = 5) -> dict:
    """Keys, prompt ids and timings of SCG-Mem's constrained calls against the server at `url`
    (serving `folder` under the name `model_id`, default the folder's path)."""
    from scgmem.core.decoding import key_end_id
    from scgmem.core.schema import CognitiveSchema
    from scgmem.llm.constraint_spec import KeyConstraint
    from scgmem.llm.key_rule import KeyRule
    from scgmem.llm.served.lark_trie import key_grammar
    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM

    model_id = model_id or folder
    llm = OpenAICompatibleLLM(url, model_id, tokenizer=folder, engine="vllm", max_in_flight=8)
    schema = CognitiveSchema(llm.encode, llm.vocab_size, forbidden_ids=llm.eos_ids)
    for concept in concepts():
        schema.add(concept)
    root_width = sum(1 for _ in schema.trie.edges(schema.trie.ROOT))
    constraint = KeyConstraint(schema.trie, terminator=schema.terminator, end_id=key_end_id(llm), max_keys=5)
    prompt = llm.render("List the topics of: 'I went camping with my kids and we painted the sunset.'",
                        assistant_prefix="Keywords:")

    def keys_of(ids: list[int]) -> list[list[int]]:
        out, cur = [], []
        for t in ids:
            if t == schema.terminator:
                out.append(cur)
                cur = []
            else:
                cur.append(t)
        return out + ([cur] if cur else [])

    greedy = llm.generate([prompt], constraint=constraint, max_new_tokens=48, temperature=0.0, seeds=[0])[0]
    beams = llm.generate([prompt], constraint=constraint, max_new_tokens=24, num_beams=5, num_return_sequences=5)[0]
    keys = [k for g in greedy + beams for k in keys_of(g.token_ids)]
    outside = sum(schema.concept_of_tokens(k) is None for k in keys)

    # the ids the harness sends are the local tokenizer's; vLLM echoes what it received
    ids = llm.encode(prompt)
    base = {"model": model_id, "max_tokens": 1, "temperature": 0.0, "return_token_ids": True}
    echoed, _ = _post(url.rstrip("/") + "/completions", {**base, "prompt": ids})
    as_text, _ = _post(url.rstrip("/") + "/completions", {**base, "prompt": prompt, "add_special_tokens": False})

    # overhead: the same prompt and length with and without the schema grammar (compiled by the
    # server per request: llguidance builds the token-id lexer lazily)
    grammar = key_grammar(KeyRule.of(constraint))
    t0 = time.perf_counter()
    from llguidance import LLMatcher  # the client-side compile of the same grammar, for scale

    LLMatcher.validate_grammar(grammar)
    validate_s = time.perf_counter() - t0
    plain, constrained = [], []
    for i in range(repeats):
        body = {"model": model_id, "prompt": ids, "max_tokens": 4, "temperature": 0.0, "seed": i,
                "skip_special_tokens": False}
        plain.append(_post(url.rstrip("/") + "/completions", {**body, "ignore_eos": True})[1])
        constrained.append(_post(url.rstrip("/") + "/completions",
                                 {**body, "structured_outputs": {"grammar": grammar}})[1])
    model_vocab = json.loads((Path(folder) / "config.json").read_text())["vocab_size"]  # the score columns
    return {"vocab_size": model_vocab, "tokenizer_size": len(llm.tokenizer), "concepts": len(schema),
            "root_width": root_width, "greedy_keys": [llm.decode(k) for k in keys_of(greedy[0].token_ids)],
            "beam_keys": [llm.decode(b.token_ids) for b in beams], "outside_schema": outside,
            "prompt_ids_equal": echoed["choices"][0].get("prompt_token_ids") == ids,
            "text_tokenisation_equal": as_text["choices"][0].get("prompt_token_ids") == ids,
            "grammar_chars": len(grammar), "grammar_validate_s_client": round(validate_s, 4),
            "request_s_plain_median": round(statistics.median(plain), 4),
            "request_s_constrained_median": round(statistics.median(constrained), 4),
            "first_constrained_request_s": round(constrained[0], 4),
            "constrained_over_plain": round(statistics.median(constrained) / statistics.median(plain), 3),
            "constrained_requests": llm.constrained.requests, "prompt_tokens": len(ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=("qwen2.5", "llama3.2"))
    parser.add_argument("--out", default="results/served/vllm_vocab.json")
    parser.add_argument("--logs", default="/tmp/vllm_vocab_logs", help="where the servers' logs go")
    args = parser.parse_args()
    from scgmem.llm.doubles.tiny_real_models import build_tiny_real_model
    from scgmem.llm.served.launchers.launch import stop_process
    from scgmem.llm.served.launchers.vllm import start
    from tests.llm.servers import free_port

    results = {"machine": platform.processor() or platform.machine(), "families": {}}
    for family in args.family or ["qwen2.5", "llama3.2"]:
        with tempfile.TemporaryDirectory() as tmp:
            folder = build_tiny_real_model(family, Path(tmp) / "model", hidden=256)  # head_dim 64: vLLM's CPU attention has no 16
            port = free_port()
            t0 = time.perf_counter()
            log = Path(args.logs) / f"vllm-{family}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            proc = start(port, model=str(folder), served_name=None, max_model_len=4096, log=log)
            started = time.perf_counter() - t0
            try:
                facts = probe_vocabulary(f"http://127.0.0.1:{port}/v1", str(folder))
            except Exception as e:  # recorded, not hidden: the server's log says why
                facts = {"error": str(e).splitlines()[0][:300], "server_log": str(log)}
            finally:
                stop_process(proc)
        results["families"][family] = {**facts, "server_start_s": round(started, 1)}
        print(family, json.dumps(results["families"][family])[:400], flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
