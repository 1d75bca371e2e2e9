"""Fixtures of the SCG-Mem core tests: a model that really decodes under the schema constraint
(the tiny random Llama) but whose *free* generations are scripted, so evolution's parsing,
validation and insertion are tested on chosen outputs."""
from __future__ import annotations

import pytest

from scgmem.api import Conversation, Session, Turn
from scgmem.llm.doubles.fake import HybridLLM


@pytest.fixture(autouse=True)
def one_thread():
    """The core tests run small models and tiny tensors: on a shared 2-core box a second
    intra-op thread only adds contention (measured up to ~8x slower), so use one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def hybrid(tiny_llm):
    return lambda script: HybridLLM(tiny_llm, script)


def make_conversation(texts, per_session=4, sample_id="conv-test") -> Conversation:
    sessions = []
    for s in range(0, len(texts), per_session):
        index = s // per_session + 1
        date = f"1:00 pm on {index} May, 2023"
        turns = tuple(Turn(dia_id=f"D{index}:{i + 1}", speaker="Ann" if i % 2 == 0 else "Bob", text=t,
                           session=index, date_time=date) for i, t in enumerate(texts[s:s + per_session]))
        sessions.append(Session(index=index, date_time=date, turns=turns))
    return Conversation(sample_id=sample_id, speaker_a="Ann", speaker_b="Bob", sessions=tuple(sessions), qa=())
