"""Hidden decoding defaults: a checkpoint's generation_config never changes what is generated."""
import json
import shutil

import pytest
from transformers import AutoModelForCausalLM

from scgmem.llm import LLM

PROMPTS = ["Caroline went hiking", "Melanie painted a sunrise by the lake today", "coffee"]
# What Qwen2.5-Instruct's generation_config.json sets, plus n-gram blocking and a minimum length.
HIDDEN = {"repetition_penalty": 1.05, "no_repeat_ngram_size": 2, "top_k": 20, "top_p": 0.8, "temperature": 0.7,
          "do_sample": True, "min_new_tokens": 4}


@pytest.fixture(scope="module")
def penalised_dir(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("penalised")
    shutil.copytree(tiny_model_dir, folder, dirs_exist_ok=True)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, **HIDDEN}))
    return folder


def test_outputs_equal_the_neutral_ones(tiny_model_dir, penalised_dir):
    neutral = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, memo_entries=0)
    penalised = LLM(name="tiny", path=str(penalised_dir), context_window=512, memo_entries=0)
    prompts = [neutral.render(p) for p in PROMPTS]
    for kwargs in ({}, {"temperature": 0.8, "seeds": [1, 2, 3]}, {"num_beams": 3, "num_return_sequences": 2}):
        a = neutral.generate(prompts, max_new_tokens=12, **kwargs)
        b = penalised.generate(prompts, max_new_tokens=12, **kwargs)
        assert [[g.token_ids for g in row] for row in a] == [[g.token_ids for g in row] for row in b], kwargs
        assert [g.logprob for row in a for g in row] == pytest.approx([g.logprob for row in b for g in row])


def test_the_hidden_defaults_would_have_changed_them(tiny_model_dir, penalised_dir):
    """The check above can fail: transformers' own generate applies the file's settings."""
    neutral = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, memo_entries=0)
    [[ours]] = neutral.generate([neutral.render(PROMPTS[0])], max_new_tokens=12)
    model = AutoModelForCausalLM.from_pretrained(penalised_dir)
    ids = neutral.tokenizer(neutral.render(PROMPTS[0]), return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False, pad_token_id=neutral.tokenizer.pad_token_id)
    assert out[0, ids["input_ids"].shape[1]:].tolist() != ours.token_ids


def test_effective_settings_are_reported_per_call_kind(penalised_dir):
    llm = LLM(name="tiny", path=str(penalised_dir), context_window=512, memo_entries=0)
    with llm.usage.under("answer"):
        llm.generate([llm.render("a")], max_new_tokens=5, temperature=0.7, seeds=[1])
        llm.generate([llm.render("b")], max_new_tokens=9, temperature=0.5, seeds=[2])
    with llm.usage.under("ingest"):
        llm.generate([llm.render("c")], max_new_tokens=3, stop=["\n"])
    report = llm.generation_report()
    sampled, greedy = report["calls"]["answer/sampled"], report["calls"]["ingest/greedy"]
    assert sampled["calls"] == 2 and sampled["max_new_tokens"] == [5, 9] and sampled["temperature"] == [0.5, 0.7]
    for entry in (sampled, greedy):
        settings = entry["settings"]
        assert settings["repetition_penalty"] == 1.0 and settings["no_repeat_ngram_size"] == 0
        assert settings["do_sample"] is False and settings["min_new_tokens"] is None
    assert greedy["stop"] == ["\n"]
    assert report["neutralised_model_defaults"]["repetition_penalty"] == 1.05
    assert "repetition_penalty" not in llm.model.generation_config.to_diff_dict()  # nothing left to merge
