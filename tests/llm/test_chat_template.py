"""The chat policy: the same prompt on any day, and the same system message for every model."""
import datetime as real_datetime

import pytest
from transformers import AutoTokenizer
from transformers.utils import chat_template_utils

from scgmem.llm.chat_template import ChatPolicy, render_messages, template_report
from scgmem.llm.doubles.real_tokenizers import LLAMA32_TEMPLATE

# Llama 3.2's template, with its date logic (meta-llama/Llama-3.2-1B-Instruct tokenizer_config.json).
LLAMA_STYLE = LLAMA32_TEMPLATE
# Qwen2.5's default system message when a conversation has none.
QWEN_STYLE = (
    "{%- if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
MESSAGES = [{"role": "user", "content": "When did Caroline go to the support group?"}]


def clock_at(monkeypatch, day: real_datetime.datetime):
    class Frozen(real_datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return day

    monkeypatch.setattr(chat_template_utils, "datetime", Frozen)


@pytest.fixture()
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_llama_style_template_renders_the_same_prompt_on_two_days(tokenizer, monkeypatch):
    tokenizer.chat_template = LLAMA_STYLE
    policy = ChatPolicy()
    rendered, unfixed = [], []
    for day in (real_datetime.datetime(2025, 3, 1, 9), real_datetime.datetime(2026, 12, 3, 18)):
        clock_at(monkeypatch, day)
        unfixed.append(tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True))
        rendered.append(render_messages(tokenizer, MESSAGES, policy))
    assert unfixed[0] != unfixed[1] and "Today Date: 01 Mar 2025" in unfixed[0]  # the clock leaks without the policy
    assert rendered[0] == rendered[1]
    assert "Today Date: 26 Jul 2024" in rendered[0] and "You are a helpful assistant." in rendered[0]


def test_templates_that_call_strftime_now_directly_see_the_policy_date(tokenizer, monkeypatch):
    tokenizer.chat_template = "{{ strftime_now('%Y-%m-%d') }}|{% for m in messages %}{{ m['content'] }}{% endfor %}"
    clock_at(monkeypatch, real_datetime.datetime(2030, 1, 2))
    assert render_messages(tokenizer, MESSAGES, ChatPolicy(date="2023-05-08")).startswith("2023-05-08|")


def test_the_template_default_system_message_is_replaced(tokenizer):
    tokenizer.chat_template = QWEN_STYLE
    text = render_messages(tokenizer, MESSAGES, ChatPolicy(system_prompt="Answer briefly."))
    assert "You are Qwen" not in text and text.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>")
    own = [{"role": "system", "content": "A method's own system message."}, *MESSAGES]
    assert "A method's own system message." in render_messages(tokenizer, own, ChatPolicy())
    assert "You are Qwen" in render_messages(tokenizer, MESSAGES, ChatPolicy(system_prompt=None))


def test_report_hashes_change_with_the_policy(tokenizer):
    a = template_report(tokenizer, ChatPolicy())
    b = template_report(tokenizer, ChatPolicy(system_prompt="Answer briefly."))
    assert a["template_sha256"] == b["template_sha256"] and a["probe_sha256"] != b["probe_sha256"]
    assert len(a["probe_sha256"]) == 64 and a["system_prompt"] == "You are a helpful assistant."


def test_bad_policy_values_name_the_field():
    with pytest.raises(ValueError, match="protocol.date"):
        ChatPolicy(date="yesterday")
    with pytest.raises(ValueError, match="protocol.system_prompt"):
        ChatPolicy(system_prompt=3)
