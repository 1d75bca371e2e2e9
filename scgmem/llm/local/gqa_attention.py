"""`model.attn_implementation: gqa_sdpa`: grouped-query attention without copies of K and V.

Llama-3.2 and Qwen2.5 keep fewer key/value heads than query heads (Llama-3.2-1B 32/8, Qwen2.5-3B
16/2, SmolLM2-135M 9/3). transformers 5.25's `sdpa` function repeats K and V for every query head
(`repeat_kv`) whenever an attention mask is given, which is always in the harness (left padding,
the prefix cache's `[prefix | pads | suffix]` layout). In eager decode it packs the query instead
(`pack_gqa`), but not under torch.compile (`is_torchdynamo_compiling`), so a compiled decode step
copies the whole KV cache 4-8x per layer per step, and every prefill copies it too.

This function never copies K/V:
- one query position (a decode step, compiled or not): the query heads of a group become that
  group's query rows, (batch, kv_heads, groups, dim), against the unrepeated K/V; the mask
  (batch, 1, 1, keys) broadcasts over them. The same packing transformers uses in eager decode.
- several query positions (prefill): SDPA's `enable_gqa=True` on the CPU, or without a mask. On
  CUDA with a mask it repeats as `sdpa` does: there torch's GQA support is limited to the flash
  and cuDNN kernels, which take no mask, so `enable_gqa` would drop to the math kernel.
Anything unusual (softcap, position bias, attention weights requested) goes to transformers' own
`sdpa` function. Outputs equal `sdpa`'s up to float rounding (tests/llm/test_gqa_attention.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "gqa_sdpa"
IMPLEMENTATIONS = (NAME, "sdpa", "eager")


def gqa_sdpa_forward(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (batch, heads, q, dim), key/value
    (batch, kv_heads, keys, dim); returns (batch, q, heads, dim)."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if (groups == 1 or kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None
            or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    batch, heads, q_len, dim = query.shape
    if q_len == 1:
        packed = query.reshape(batch, heads // groups, groups, dim)  # (batch, kv_heads, groups, dim)
        out = F.scaled_dot_product_attention(packed, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                             scale=scaling)
        return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None
    causal = attention_mask is None and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    if causal and key.shape[2] > q_len:
        # Prefill into an empty static cache without padding: transformers drops the mask (q_offset 0),
        # and K/V hold every slot. SDPA's causal mask is upper-left aligned, so keys past q_len are never
        # attended, but with q_len != kv_len CUDA's flash kernel refuses causal and the math kernel
        # materialises (rows, heads, q, slots) fp32 scores (issue 40, item 2). transformers' own `sdpa`
        # slices the same way (integrations/sdpa_attention.py, "prefill with an empty StaticCache").
        key, value = key[:, :, :q_len], value[:, :, :q_len]  # (batch, kv_heads, q, dim)
    if query.device.type == "cuda" and attention_mask is not None:
        key, value, extra = repeat_kv(key, groups), repeat_kv(value, groups), {}
    else:
        extra = {"enable_gqa": True}
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=bool(causal), **extra)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Make `gqa_sdpa` a name transformers knows, for the attention function and for its mask
    (a name without a mask function gets no mask at all: padding would be attended)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, gqa_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    AttentionInterface.register("repeat_kv_sdpa", repeat_kv_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register("repeat_kv_sdpa", sdpa_mask)


def repeat_kv_sdpa_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                           scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """SDPA after repeating K/V per query head at every call: what transformers' `sdpa` does under
    torch.compile and in masked prefill. Registered as `repeat_kv_sdpa` by `register` for
    benchmarks (scripts/bench_attention.py, scripts/device_throughput.py), not a config choice."""
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = query.shape[2] > 1 and attention_mask is None and (is_causal if is_causal is not None else True)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=bool(causal))
    return out.transpose(1, 2).contiguous(), None


def check_implementation(name: str) -> str:
    """`model.attn_implementation` validated (and `gqa_sdpa` registered)."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"model.attn_implementation={name!r} is not one of {list(IMPLEMENTATIONS)}")
    if name == NAME:
        register()
    return name
