"""`model.attn_implementation: gqa_sdpa` computes what transformers' `sdpa` computes, without K/V copies."""
import pytest
import torch

from scgmem.llm import LLM
from scgmem.llm.local.gqa_attention import check_implementation, gqa_sdpa_forward

PROMPTS = ["Caroline went to the support group", "Melanie painted a sunrise by the lake; she loves hiking",
           "What did Caroline research?"]


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    """The tiny model (4 query heads over 2 KV heads) with each implementation."""
    make = lambda impl: LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4,  # noqa: E731
                            prefix_cache=False, memo_entries=0, attn_implementation=impl)
    return make("sdpa"), make("gqa_sdpa")


def test_bad_name_names_the_config_key():
    with pytest.raises(ValueError, match="model.attn_implementation='flash'"):
        check_implementation("flash")


def test_the_model_runs_the_registered_function(pair):
    _, gqa = pair
    assert gqa.model.config._attn_implementation == "gqa_sdpa"
    assert gqa.model.config.num_attention_heads > gqa.model.config.num_key_value_heads  # a GQA model


def test_padded_prefill_and_decode_logits_match_repeat_kv(pair):
    plain, gqa = pair
    enc = plain.tokenizer([plain.render(p) for p in PROMPTS], return_tensors="pt", padding=True)
    assert (enc["attention_mask"] == 0).any()  # left padding: a mask is in play
    with torch.no_grad():
        outs = [llm.model(**enc, use_cache=True) for llm in pair]
        torch.testing.assert_close(outs[1].logits, outs[0].logits, rtol=1e-5, atol=1e-5)
        step = outs[0].logits[:, -1:].argmax(-1)
        mask = torch.cat([enc["attention_mask"], torch.ones_like(step)], dim=1)
        decoded = [llm.model(input_ids=step, attention_mask=mask, **{llm._cache_keyword: o.past_key_values}, use_cache=True)
                   for llm, o in zip(pair, outs)]
    torch.testing.assert_close(decoded[1].logits, decoded[0].logits, rtol=1e-5, atol=1e-5)


def test_greedy_tokens_match(pair):
    plain, gqa = pair
    prompts = [plain.render(p) for p in PROMPTS]
    a = plain.generate(prompts, max_new_tokens=12)
    b = gqa.generate(prompts, max_new_tokens=12)
    assert [g[0].token_ids for g in a] == [g[0].token_ids for g in b]
    assert [g[0].logprob for g in a] == pytest.approx([g[0].logprob for g in b], abs=1e-4)


def test_no_mask_and_causal_prefill_match_repeat_kv():
    class Module:
        num_key_value_groups, is_causal = 3, True

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 6, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    for query in (q, q[:, :, -1:]):
        ours, _ = gqa_sdpa_forward(Module(), query, k, v, None)  # prefill (causal), then one decode query
        theirs, _ = sdpa_attention_forward(Module(), query, k, v, None)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
