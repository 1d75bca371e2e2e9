"""The LLM protocol: both backends implement `LanguageModel`, an object missing a member does
not, and the real backend's answers come from its tokenizer and model."""
from __future__ import annotations

import torch

from scgmem.llm.doubles.fake import ScriptedLLM
from scgmem.llm.protocol import LanguageModel


class Minimal:
    """Every member of the protocol, as plain values."""

    name = "minimal"
    context_window = 64
    vocab_size = 10
    pad_id = 8
    eos_id = 9
    eos_ids = [9]
    dtype = "torch.float32"
    applies_constraints = False

    def encode(self, text):
        return [0]

    def decode(self, ids):
        return ""

    def count_tokens(self, text):
        return 1

    def render(self, messages, *, add_generation_prompt=True, assistant_prefix=""):
        return ""

    def generate(self, prompts, **kwargs):
        return [[] for _ in prompts]


def test_both_backends_implement_the_protocol(tiny_llm):
    assert isinstance(tiny_llm, LanguageModel)
    assert isinstance(ScriptedLLM(["x"]), LanguageModel)
    assert isinstance(Minimal(), LanguageModel)


def _absent(self):
    raise AttributeError


def test_an_object_missing_a_member_is_rejected():
    for member in ("vocab_size", "pad_id", "eos_ids", "decode", "generate", "context_window"):
        lacking = type("Lacking", (Minimal,), {member: property(_absent)})  # Minimal without `member`
        assert not isinstance(lacking(), LanguageModel), member


def test_the_real_backend_answers_from_its_tokenizer_and_model(tiny_llm):
    tok, model = tiny_llm.tokenizer, tiny_llm.model
    assert tiny_llm.vocab_size == model.config.vocab_size == model.get_output_embeddings().weight.shape[0]
    assert tiny_llm.pad_id == tok.pad_token_id and tiny_llm.eos_id == tok.eos_token_id
    assert tiny_llm.eos_id in tiny_llm.eos_ids and tiny_llm.eos_ids == sorted(tiny_llm.eos_ids)
    assert tiny_llm.dtype == str(torch.float32) and tiny_llm.applies_constraints
    ids = tiny_llm.encode(" hiking trip, lake")
    assert tiny_llm.decode(ids) == " hiking trip, lake"


def test_the_scripted_stand_in_keeps_pad_and_eos_outside_its_words():
    llm = ScriptedLLM(["x"])
    ids = llm.encode("a hiking trip")
    assert llm.decode(ids) == "a hiking trip"
    assert all(0 <= i < llm.vocab_size for i in ids) and not {llm.pad_id, *llm.eos_ids} & set(ids)
    assert llm.vocab_size > max(llm.pad_id, *llm.eos_ids) and not llm.applies_constraints
