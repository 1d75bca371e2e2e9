"""bench_compute_bound's attention term times the attention function the run's model calls."""
import pytest

import scgmem.llm.local.gqa_attention as gqa
from scripts.bench_compute_bound import TINY, attention_dims, run_attention
from scripts.gemm_timing import attention_function, build_kernel


def test_the_run_s_implementation_is_read_from_its_summary():
    assert run_attention({"generation": {"attn_implementation": "gqa_sdpa"}}) == "gqa_sdpa"
    assert run_attention({"config": {"model": {"attn_implementation": "sdpa"}}}) == "sdpa"
    assert run_attention({"config": {"model": {}}}) == "sdpa"  # runs from before the key ran transformers' sdpa
    assert run_attention(None) == "gqa_sdpa"
    dims = attention_dims({"prefill_ctx": 10, "rows": 2, "decode_ctx": 12}, "sdpa")
    assert {d["implementation"] for d in dims} == {"sdpa"}


def test_decode_timing_calls_the_model_s_attention_function(monkeypatch):
    calls = []
    real = gqa.gqa_sdpa_forward

    def spy(module, query, key, value, mask, **kw):
        calls.append((module.num_key_value_groups, tuple(query.shape), tuple(key.shape), mask is not None))
        return real(module, query, key, value, mask, **kw)

    monkeypatch.setattr(gqa, "gqa_sdpa_forward", spy)
    try:
        run, flops = build_kernel("sdpa_decode", TINY, __import__("torch").float32, rows=3, q_len=1, ctx=20,
                                  implementation="gqa_sdpa")
        run()
    finally:
        monkeypatch.undo()
        gqa.register()  # the real function back under its name
    assert calls == [(2, (3, 4, 1, 16), (3, 2, 20, 16), True)]  # unrepeated K/V, a padding mask
    assert flops > 0


def test_attention_function_is_transformers_dispatch():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    assert attention_function("gqa_sdpa", 3)[0] is gqa.gqa_sdpa_forward
    assert attention_function("sdpa", 3)[0] is sdpa_attention_forward
    with pytest.raises(ValueError, match="model.attn_implementation"):
        attention_function("flash", 3)
