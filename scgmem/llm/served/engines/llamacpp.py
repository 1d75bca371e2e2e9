"""llama.cpp's dialect: its native /completion with token-id prompts and llguidance grammars.

Measured on this machine with the embedded SmolLM2 GGUF served by xllamacpp (llama.cpp's own
server, llguidance compiled in; tests/llm/test_served_llamacpp.py):

* `prompt` may be a list of token ids; `return_tokens: true` returns the generated ids;
* a `grammar` that starts with `%llguidance {}` is read as llguidance Lark, token-id terminals
  `<[id]>` included;
* `n_probs: n` fills `completion_probabilities`: per generated token its id, `logprob` and the
  top-n `top_logprobs`, all *raw* (computed before the grammar and the samplers; a token the
  grammar forced can show -24), so generation log-probs need no scoring pass;
* `cache_prompt: true` keeps the slot's KV cache, so the next request that extends the same
  prompt by a key (greedy lists) or a token (beam expansions) evaluates only the new tokens.

The samplers are neutralised on every request (top_k 0 = off, top_p 1, min_p 0, no penalties),
so greedy decoding under the grammar is the argmax over the allowed tokens, as locally.
"""
from __future__ import annotations

from scgmem.llm.served.engines.dialect import (BadReply, Continuation, EngineDialect, NextTokens, number, token_id,
                                      top_list)
from scgmem.llm.served.engines import register_engine

PATH = "/completion"  # the server root's native endpoint, beside /v1
NEUTRAL = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
           "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "xtc_probability": 0.0,
           "mirostat": 0, "cache_prompt": True, "return_tokens": True, "stream": False}
MAX_TOP_N = 1 << 16  # past the vocabulary, the whole distribution


@register_engine
class LlamaCppDialect(EngineDialect):
    """llama.cpp's server (`llama-server`, or xllamacpp's) on its native /completion.

    Args:
        model_id: the served GGUF (recorded; /completion serves the one model the server loaded).
    """

    name = "llamacpp"
    route = "generation log-probs (llama.cpp's n_probs are raw); next token: n_probs top list"
    max_top_n = MAX_TOP_N
    # measured on conv-26 session 1's recall (b=5): asking for 64 first took 104 requests and 15.6 s,
    # 4,096 first 50 requests and 8.7 s (the list is one sort of the vocabulary either way)
    first_top_n = 4096

    def build_continue(self, prompt_ids: list[int], grammar: str, *, max_tokens: int, temperature: float,
                       seed: int) -> tuple[str, dict]:
        header = "" if grammar.startswith("%llguidance") else "%llguidance {}\n"
        return PATH, {**NEUTRAL, "prompt": prompt_ids, "n_predict": max_tokens,
                      "temperature": float(temperature), "seed": int(seed), "n_probs": 1,
                      "grammar": header + grammar}

    def parse_continue(self, reply: dict) -> Continuation:
        probs = self.listed(reply.get("completion_probabilities"), "completion_probabilities")
        ids, lps = [], []
        for i, entry in enumerate(probs):
            where = f"completion_probabilities[{i}]"
            if not isinstance(entry, dict):
                raise BadReply(f"{where}: expected an object")
            ids.append(token_id(entry.get("id"), f"{where}.id"))
            lps.append(number(entry.get("logprob"), f"{where}.logprob"))
        tokens = reply.get("tokens")  # junk around the ids is a disagreement too; [] is "not sent"
        ids = self.agreed_ids(None if tokens in (None, []) else tokens, ids, "tokens", "completion_probabilities ids")
        finish = "length" if reply.get("stop_type") == "limit" else "stop"
        return Continuation(ids, lps, finish)

    def build_next(self, prompt_ids: list[int], allowed: list[int], top_n: int) -> tuple[str, dict]:
        return PATH, {**NEUTRAL, "prompt": prompt_ids, "n_predict": 1, "temperature": 0.0, "n_probs": top_n}

    def parse_next(self, reply: dict, allowed: list[int]) -> NextTokens:
        probs = self.listed(reply.get("completion_probabilities"), "completion_probabilities")
        if not probs or not isinstance(probs[0], dict):
            raise BadReply("completion_probabilities[0]: missing")
        top = probs[0].get("top_logprobs")
        if not isinstance(top, list):
            raise BadReply("completion_probabilities[0].top_logprobs: expected a list")
        pairs = []
        for i, entry in enumerate(top):
            where = f"completion_probabilities[0].top_logprobs[{i}]"
            if not isinstance(entry, dict):
                raise BadReply(f"{where}: expected an object")
            pairs.append((token_id(entry.get("id"), f"{where}.id"), number(entry.get("logprob"), f"{where}.logprob")))
        listed = top_list(pairs, "completion_probabilities[0].top_logprobs", ranked=True)
        wanted = set(allowed)
        floor = min(listed.values()) if listed else float("-inf")
        return NextTokens({t: lp for t, lp in listed.items() if t in wanted}, complete=wanted <= listed.keys(),
                          floor=floor, listed=tuple(listed))

    def build_score(self, prompt_ids: list[int], continuation: list[int]) -> tuple[str, dict]:
        # the continuation forced by a grammar of exactly its ids: llama.cpp reports raw log-probs
        grammar = "start: " + " ".join(f"<[{int(t)}]>" for t in continuation)
        return self.continue_body(prompt_ids, grammar, max_tokens=len(continuation), temperature=0.0, seed=0)

    def parse_score(self, reply: dict, prompt_len: int, continuation: list[int]) -> list[float]:
        got = self.parse_continue(reply)
        if got.token_ids[:len(continuation)] != continuation:
            raise BadReply(f"completion_probabilities: ids {got.token_ids[:8]} are not the forced {continuation[:8]}")
        return got.raw_logprobs[:len(continuation)]

