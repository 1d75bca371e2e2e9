"""The arithmetic a run's LLM work needs, from its summary.json, and the CPU's vector flags.

Counted (one multiply-add = 2 FLOPs; only matrix products, the rest is < 1% at these sizes):

  body   = the decoder layers' weight matrices (q, k, v, o, gate, up, down), per token
           2 * N_body FLOPs, for every prompt token computed and every generated token.
  head   = lm_head (d x vocab), 2 * N_head FLOPs, only where a token is chosen: once per generated
           token. Logits over prompt positions are never needed (HF generate keeps the last one).
  attention, per layer and per query token over a context of c keys: Q.K^T and A.V, each
           2 * A * c FLOPs (A = heads * head_dim), so 4 * L * A * c in all. Causal prefill of P tokens:
           sum_i i ~ P^2 / 2 (a prompt token attends to half its prompt on average); a prompt whose
           first p tokens came from the prefix cache computes only the rest: (P^2 - p^2) / 2.
           Generated token j attends to P + j keys: G * P + G^2 / 2 per call.

Assumptions, all of which make the count a lower bound of the work actually done:
  - the summary gives per phase only totals, so every call gets the phase's mean prompt length P,
    mean cached prefix p and mean generation G; since sum(P^2) >= calls * mean(P)^2, the attention
    terms are under-counted when lengths vary;
  - pads (batch rows shorter than the longest) are wasted work, not needed work: not counted;
  - calls answered from the memo did no work: their share (memo_hits / calls) of the phase's tokens
    is removed, assuming memo hits have the phase's mean size;
  - the stop token (EOS), which the usage meter does not count, is not counted either;
  - the sentence embedder (retrieval) is not LLM work and is not counted.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, config: dict, source: str = "config.json") -> ModelShape:
        try:
            heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            return cls(hidden=hidden, intermediate=int(config["intermediate_size"]),
                       layers=int(config["num_hidden_layers"]), heads=heads,
                       kv_heads=int(config.get("num_key_value_heads", heads)),
                       head_dim=int(config.get("head_dim") or hidden // heads), vocab=int(config["vocab_size"]))
        except KeyError as e:
            raise ValueError(f"{source}: missing field {e.args[0]!r}") from None

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelShape:
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no model config (run `make prepare-model` for the embedded model)")
        return cls.from_config(json.loads(path.read_text()), source=str(path))

    @property
    def attention_width(self) -> int:
        """A = heads * head_dim: the width of the queries (and of the attention output)."""
        return self.heads * self.head_dim

    def layer_gemms(self) -> list[tuple[str, int, int]]:
        """One decoder layer's weight products as (name, in_features K, out_features N)."""
        d, a, kv = self.hidden, self.attention_width, self.kv_heads * self.head_dim
        return [("q_proj", d, a), ("k_proj", d, kv), ("v_proj", d, kv), ("o_proj", a, d),
                ("gate_proj", d, self.intermediate), ("up_proj", d, self.intermediate),
                ("down_proj", self.intermediate, d)]

    @property
    def body_params(self) -> int:
        return self.layers * sum(k * n for _, k, n in self.layer_gemms())

    @property
    def head_params(self) -> int:
        return self.hidden * self.vocab


@dataclass(frozen=True)
class PhaseTokens:
    """One phase's entry of summary.json's "tokens" (see scgmem/llm/usage.py)."""
    calls: int
    prompt_tokens: int
    generated_tokens: int
    cached_prompt_tokens: int = 0
    memo_hits: int = 0

    @classmethod
    def from_usage(cls, usage: dict, source: str = "tokens") -> PhaseTokens:
        try:
            return cls(calls=int(usage["calls"]), prompt_tokens=int(usage["prompt_tokens"]),
                       generated_tokens=int(usage["generated_tokens"]),
                       cached_prompt_tokens=int(usage.get("cached_prompt_tokens", 0)),
                       memo_hits=int(usage.get("memo_hits", 0)))
        except KeyError as e:
            raise ValueError(f"{source}: missing field {e.args[0]!r}") from None


def phase_flops(shape: ModelShape, tokens: PhaseTokens) -> dict[str, float]:
    """FLOPs one phase needs, split by kind (see the module docstring), plus the token counts used."""
    computed_calls = tokens.calls - tokens.memo_hits
    if tokens.calls <= 0 or computed_calls <= 0:
        return {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0, "mean_prompt": 0.0, "mean_cached": 0.0,
                "mean_generated": 0.0, "body_prefill": 0.0, "body_decode": 0.0, "head": 0.0,
                "attention_prefill": 0.0, "attention_decode": 0.0, "total": 0.0}
    share = computed_calls / tokens.calls
    prompt = tokens.prompt_tokens * share - tokens.cached_prompt_tokens  # prompt tokens run through the model
    generated = tokens.generated_tokens * share
    mean_prompt = tokens.prompt_tokens / tokens.calls
    mean_cached = tokens.cached_prompt_tokens / computed_calls
    mean_generated = tokens.generated_tokens / tokens.calls
    per_key = 4 * shape.layers * shape.attention_width  # FLOPs per (query token, key) pair over all layers
    out = {
        "calls": computed_calls, "prompt_tokens": prompt, "generated_tokens": generated,
        "mean_prompt": mean_prompt, "mean_cached": mean_cached, "mean_generated": mean_generated,
        "body_prefill": 2 * shape.body_params * prompt,
        "body_decode": 2 * shape.body_params * generated,
        "head": 2 * shape.head_params * generated,
        "attention_prefill": computed_calls * per_key * (mean_prompt ** 2 - mean_cached ** 2) / 2,
        "attention_decode": computed_calls * per_key * (mean_generated * mean_prompt + mean_generated ** 2 / 2),
    }
    out["total"] = sum(out[k] for k in ("body_prefill", "body_decode", "head", "attention_prefill",
                                        "attention_decode"))
    return out


def run_flops(shape: ModelShape, summary: dict, source: str = "summary.json") -> dict[str, dict[str, float]]:
    """phase_flops for every phase in a run summary's "tokens"."""
    tokens = summary.get("tokens")
    if not isinstance(tokens, dict):
        raise ValueError(f"{source}: field 'tokens' missing (not a run summary?)")
    return {phase: phase_flops(shape, PhaseTokens.from_usage(usage, f"{source}: tokens.{phase}"))
            for phase, usage in tokens.items() if usage}


# Vector extensions that matter for a CPU GEMM, fastest last within each family.
VECTOR_FLAGS = ("sse4_2", "fma", "f16c", "avx", "avx2", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def parse_cpuinfo(text: str) -> dict:
    """Model name, logical CPUs and the GEMM-relevant flags from /proc/cpuinfo text."""
    flags: set[str] = set()
    model, processors = None, 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            processors += 1
        elif key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(re.split(r"\s+", value.strip()))
    return {"model_name": model, "logical_cpus": processors,
            "vector_flags": [f for f in VECTOR_FLAGS if f in flags],
            "native_bf16": any(f in flags for f in NATIVE_BF16_FLAGS)}
