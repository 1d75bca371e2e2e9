"""Cached memories stay valid across moves of the method classes: the baselines moved from a
top-level package `baselines` into scgmem.baselines (issue 27), and each method's memory key for a
fixed config is pinned to the value the code computed before the move (at 05ad26c)."""
from __future__ import annotations

import importlib

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from scgmem.api import Conversation, Session, Turn
from scgmem.harness.cache import KEYED_AS, keyed_class, memory_key
from scgmem.testing.scripted import CONFIG_DIR
from scgmem.llm.doubles.fake import BagEmbedder, ScriptedLLM, echo_reply

# memory_key(method, ScriptedLLM, seed 0, CONVERSATION) with configs/method/<name>.yaml, computed on
# 05ad26c (before the move) by the same construction as `method_of` below.
KEYS_BEFORE_THE_MOVE = {
    "scgmem": "cb4c8636fd45b0b28e7b",
    "full_context": "2797d931e596e260eb4d",
    "last_turns": "344118918602901a2f0f",
    "rag": "f80a3b129a5aa78ba672",
    "rag_locomo": "cce0995e963d261244d8",
    "memorybank": "1fee4fe27a836f98645c",
    "amem": "0ae9e42f7667c4ead945",
    "memgpt": "80f5d24c072ae6d65c79",
    "readagent": "9df9950ead00fe7d20b7",
}
_DATE = "1:00 pm on 8 May, 2023"
_TEXTS = ["I went hiking in the Alps last May.", "Nice, with whom?", "With my sister Ann.", "Did you camp?"]
CONVERSATION = Conversation(
    sample_id="conv-key", speaker_a="Ann", speaker_b="Bob", qa=(),
    sessions=(Session(index=1, date_time=_DATE, turns=tuple(
        Turn(dia_id=f"D1:{i + 1}", speaker="Ann" if i % 2 == 0 else "Bob", text=t, session=1, date_time=_DATE)
        for i, t in enumerate(_TEXTS))),))


def method_of(name: str, llm):
    node = OmegaConf.merge({"data": {"path": "data/locomo10.json"},  # rag_locomo's data_path interpolates it
                            "method": OmegaConf.load(CONFIG_DIR / "method" / f"{name}.yaml")})
    return instantiate(node.method, llm=llm, embedder=BagEmbedder())


@pytest.mark.parametrize("name", sorted(KEYS_BEFORE_THE_MOVE))
def test_each_method_keeps_its_memory_key(name):
    llm = ScriptedLLM(echo_reply)
    assert memory_key(method_of(name, llm), llm, 0, CONVERSATION) == KEYS_BEFORE_THE_MOVE[name]


def test_every_method_config_is_keyed_by_a_class_path_it_had():
    """A config's class is either unmoved (keyed by its own path) or in KEYED_AS."""
    for path in sorted((CONFIG_DIR / "method").glob("*.yaml")):
        method = method_of(path.stem, ScriptedLLM(echo_reply))
        own = f"{type(method).__module__}.{type(method).__qualname__}"
        assert keyed_class(method) == KEYED_AS.get(own, own)
        assert own.startswith("scgmem.core.") or own in KEYED_AS, f"{path.name}: {own} moved without a KEYED_AS line"


@pytest.mark.parametrize("path", sorted(KEYED_AS))
def test_keyed_as_names_classes_that_exist(path):
    module, _, name = path.rpartition(".")
    assert isinstance(getattr(importlib.import_module(module), name), type)
