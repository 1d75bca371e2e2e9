"""The real Llama-3.2 and Qwen2.5 tokenizers (scgmem/llm/doubles/real_tokenizers.py) have the released
models' facts, and a tiny random model with each builds, loads through `LLM` and generates."""
from __future__ import annotations

import pytest

from scgmem.llm.doubles.real_tokenizers import QWEN25_SPECIALS, real_tokenizer


def test_llama32_facts():
    tok = real_tokenizer("llama3.2")
    assert len(tok) == 128256 and tok.pad_token is None
    ids = tok.convert_tokens_to_ids(["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                     "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|reserved_special_token_247|>"])
    assert ids == [128000, 128001, 128006, 128007, 128008, 128009, 128255]
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True,
                                   date_string="26 Jul 2024")
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                           "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>")
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert tok.tokenize(" 12345") == ["Ġ", "123", "45"]  # digits in threes


def test_qwen25_facts():
    tok = real_tokenizer("qwen2.5")
    assert len(tok) == 151665 and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.convert_tokens_to_ids(QWEN25_SPECIALS) == list(range(151643, 151665))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                    "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.tokenize(" 2023") == ["Ġ", "2", "0", "2", "3"]  # single digits
    assert tok.decode(tok("café ça")["input_ids"]) == "café ça"


@pytest.mark.parametrize("family,eos", [("llama3.2", [128001, 128008, 128009]), ("qwen2.5", [151643, 151645])])
def test_tiny_real_model_builds_and_generates(tmp_path, family, eos):
    from scgmem.llm import LLM
    from scgmem.llm.doubles.tiny_real_models import build_tiny_real_model

    folder = build_tiny_real_model(family, tmp_path / family)
    llm = LLM(name=family, path=str(folder), context_window=1024, batch_size=2, memo_entries=0)
    assert llm.eos_token_ids == eos
    [[a], [b]] = llm.generate([llm.render("hi"), llm.render("When did Caroline go hiking?")], max_new_tokens=4)
    assert len(a.token_ids) <= 4 and len(b.token_ids) <= 4 and (a.token_ids or a.cut is False)
    assert llm.model.config.vocab_size == {"llama3.2": 128256, "qwen2.5": 151936}[family]
