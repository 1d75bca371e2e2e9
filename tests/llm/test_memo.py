"""The generation memo: identical plain calls are answered once, and still counted as calls."""
import pytest

from scgmem.llm import LLM
from tests.llm.test_backend import OnlyToken


@pytest.fixture()
def llm(tiny_model_dir):
    return LLM(name="tiny", path=str(tiny_model_dir), context_window=512, memo_entries=3)


def test_repeat_is_a_counted_memo_hit(llm):
    prompts = [llm.render(p) for p in ["Caroline went hiking", "coffee"]]
    first = llm.generate(prompts, max_new_tokens=5, temperature=0.8, seeds=[1, 2])
    again = llm.generate(prompts[::-1], max_new_tokens=5, temperature=0.8, seeds=[2, 1])[::-1]
    assert [g[0].token_ids for g in first] == [g[0].token_ids for g in again]
    usage = llm.usage.snapshot()["other"]
    assert usage["calls"] == 4 and usage["memo_hits"] == 2
    other_seed = llm.generate(prompts[:1], max_new_tokens=5, temperature=0.8, seeds=[9])
    other_len = llm.generate(prompts[:1], max_new_tokens=4, temperature=0.8, seeds=[1])
    assert llm.usage.snapshot()["other"]["memo_hits"] == 2  # another seed or setting is another call
    assert len(llm.memo) == 3  # bounded: the oldest of four keys went
    assert other_seed and other_len


def test_calls_with_processors_are_never_memoised(llm):
    token = llm.encode(" lake")[0]
    for _ in range(2):
        llm.generate([llm.render("a")], max_new_tokens=2, processors=lambda w, r: [OnlyToken(token)])
    assert llm.usage.snapshot()["other"]["memo_hits"] == 0 and not llm.memo


def test_off_and_bad_values(tiny_model_dir):
    off = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, memo_entries=0)
    off.generate([off.render("a")], max_new_tokens=2)
    off.generate([off.render("a")], max_new_tokens=2)
    assert off.memo is None and off.usage.snapshot()["other"]["memo_hits"] == 0
    with pytest.raises(ValueError, match="model.memo_entries"):
        LLM(name="tiny", path=str(tiny_model_dir), memo_entries=-1)
