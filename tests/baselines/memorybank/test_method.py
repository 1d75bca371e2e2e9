"""MemoryBank (baselines/memorybank/method.py): units, summaries, retrieval, cache; the forgetting curve is
tested in test_memorybank_forgetting.py."""
from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import numpy as np
import pytest

from scgmem.baselines.memorybank.method import MemoryBank
from scgmem.baselines.memorybank.forgetting import ForgettingCurve
from scgmem.baselines.memorybank.units import pair_turns
from scgmem.data.locomo import load_locomo
from scgmem.llm.doubles.fake import ScriptedLLM
from tests.baselines import CountingLLM
from tests.baselines.memorybank.inputs import THREE, BagEmbedder, build, conv_of, session, summaries

PAPER, CODE = ForgettingCurve("paper"), ForgettingCurve("code")


# ---------------------------------------------------------------------------- units and summaries
def test_pairs_of_different_speakers_and_leftovers():
    s = session(1, 1, [("A", "x1"), ("B", "x2"), ("A", "x3"), ("A", "x4"), ("B", "x5"), ("A", "x6")])
    assert [[t.dia_id for t in g] for g in pair_turns(s)] == [["D1:1", "D1:2"], ["D1:3"], ["D1:4", "D1:5"], ["D1:6"]]
    bank = build(conv_of(s), forgetting="off")
    assert [u["kind"] for u in bank.units] == ["pair", "single", "pair", "single", "summary"]
    assert bank.units[0]["text"] == "Conversation content on 1:56 pm on 1 May, 2023: A: x1; B: x2"
    assert bank.units[-1]["text"] == ("The summary of the conversation on 1:56 pm on 1 May, 2023 is: "
                                      "They talked about zebras.")
    assert all(u["level"] == 0 for u in bank.units)


def test_session_summaries_in_one_call_then_global_in_one_call():
    llm = CountingLLM(summaries())
    bank = build(THREE, llm=llm)
    assert llm.calls == [6, 2]  # 2 per session, then the global summary and the portrait
    assert bank.counters["summary_calls"] == 8
    assert bank.overall_summary == "Overall, zebras." and bank.overall_personality == "Both are friendly."
    overall_prompt = llm.prompts[6]
    assert overall_prompt.count("the events are They talked about zebras.") == 3
    assert "At 1:56 pm on 3 May, 2023, the events are" in overall_prompt
    assert "A: zebra stripes" in llm.prompts[0] and "A and of B" in llm.prompts[1]


def test_empty_summaries_are_dropped_and_repeated_lines_stripped():
    llm = CountingLLM(summaries(event="  ", personality="Kind.\nkind. \nKind.\nCurious.", overall="",
                                portrait="Nice\nNice"))
    bank = build(THREE, llm=llm, forgetting="off")
    assert not [u for u in bank.units if u["kind"] == "summary"]  # no empty summary units
    assert bank.deviations["empty_summary_dropped"] == 3 + 1  # 3 session summaries + the global one
    assert bank.deviations["summary_repeated_lines"] == 3 + 1  # 3 notes + the portrait
    assert bank.sessions[0]["personality"] == "Kind.\nCurious."
    assert "the events are" not in llm.prompts[6]  # dropped summaries are not in the global prompt
    r = bank.recall("zebra", budget_tokens=1000, rng=None)
    assert "Overall summary" not in r.context and r.context.startswith("Portrait of A and B: Nice\n")


def test_global_prompt_drops_oldest_entries_to_fit_the_window():
    llm = CountingLLM(summaries(event=" ".join(["word"] * 60)), context_window=600)
    bank = build(THREE, llm=llm, summary_max_new_tokens=400)
    # Three 60-word entries do not fit 600 - 400 = 200 tokens; without the oldest they do.
    assert bank.deviations["global_prompt_truncated"] == 1
    assert llm.count_tokens(llm.prompts[6]) <= 200
    assert "on 1 May" not in llm.prompts[6] and "on 3 May" in llm.prompts[6]


# ---------------------------------------------------------------------------- retrieval and modes
def test_off_keeps_everything_and_ranks_by_cosine():
    bank = build(THREE, forgetting="off", k=1, merge_chars=0)
    assert all(u["alive"] for u in bank.units)
    r = bank.recall("pottery class", budget_tokens=1000, rng=None)
    assert r.dia_ids == ["D1:3", "D1:4"]


def test_soft_keeps_everything_and_ranks_by_cos_times_r():
    bank = build(THREE, forgetting="soft", simulate_recall=False, merge_chars=0)
    assert all(u["alive"] for u in bank.units)
    q = bank.embedder.encode(["zebra pottery job"])[0]
    cos = bank._vectors @ q
    t = np.array([bank.qa_day - u["anchor"] for u in bank.units])
    levels = np.array([u["level"] for u in bank.units])
    assert np.allclose(bank.scores(q), cos * np.exp(-t / 5 * (levels + 1)))  # the default `code` curve
    bank.curve = PAPER
    assert np.allclose(bank.scores(q), cos * np.exp(-t / (levels + 1)))
    bank.curve = CODE
    # The job pair (today) outranks the zebra pair (3 days old) although both match one word.
    bank.k = 1
    assert bank.recall("zebra job", budget_tokens=1000, rng=None).dia_ids == ["D3:1", "D3:2"]


def test_context_groups_by_date_with_summary_and_portrait_first():
    bank = build(THREE, forgetting="off", k=3, merge_chars=0)
    r = bank.recall("job camping zebra", budget_tokens=1000, rng=None)
    lines = r.context.split("\n")
    assert lines[0] == "Overall summary of the past conversations: Overall, zebras."
    assert lines[1] == "Portrait of A and B: Both are friendly."
    assert lines[2].startswith("Relevant memories (dates: 1:56 pm on 1 May, 2023; 1:56 pm on 3 May")
    dates = [re.search(r"on 1:56 pm on (\d+) May", line).group(1) for line in lines[3:]]
    assert dates == sorted(dates, key=int)
    assert r.dia_ids == ["D1:1", "D1:2", "D2:1", "D2:2", "D3:1", "D3:2"]


def test_summaries_contribute_no_ids_unless_asked():
    q = "They talked about zebras."
    bank = build(THREE, forgetting="off", k=1, merge_chars=0)
    r = bank.recall(q, budget_tokens=1000, rng=None)
    assert "The summary of the conversation" in r.context and r.dia_ids == []
    bank.summary_ids = "session"
    assert bank.recall(q, budget_tokens=1000, rng=None).dia_ids == ["D1:1", "D1:2", "D1:3", "D1:4"]


def test_same_date_neighbours_merge_up_to_merge_chars():
    bank = build(THREE, llm=CountingLLM(summaries(event="")), forgetting="off", k=1, merge_chars=200)
    r = bank.recall("pottery class", budget_tokens=1000, rng=None)
    assert r.dia_ids == ["D1:1", "D1:2", "D1:3", "D1:4"]  # 83 + 84 chars: the zebra pair is merged in
    bank.merge_chars = 100
    assert bank.recall("pottery class", budget_tokens=1000, rng=None).dia_ids == ["D1:3", "D1:4"]


def test_budget_drops_lowest_hits_then_portrait_then_summary():
    bank = build(THREE, forgetting="off", k=2, merge_chars=0)
    full = bank.recall("pottery zebra", budget_tokens=1000, rng=None)
    n = bank.llm.count_tokens(full.context)
    r = bank.recall("pottery zebra", budget_tokens=n - 1, rng=None)
    assert len(r.dia_ids) == 2 and bank.llm.count_tokens(r.context) <= n - 1
    r = bank.recall("pottery zebra", budget_tokens=10, rng=None)
    assert r.dia_ids == [] and "Portrait" not in r.context and r.context.startswith("Overall summary")
    assert bank.recall("pottery zebra", budget_tokens=2, rng=None).context == ""


def test_recall_batch_embeds_all_questions_at_once_and_does_not_call_the_llm():
    bank = build(THREE, forgetting="off")
    calls = list(bank.llm.calls)
    out = bank.recall_batch(["zebra", "job"], budget_tokens=[1000, 1000], rngs=[None, None])
    assert bank.llm.calls == calls and len(out) == 2
    assert out[0] == bank.recall("zebra", budget_tokens=1000, rng=None)


# ---------------------------------------------------------------------------- cache and reports
def test_state_dict_is_json_and_roundtrips_with_recomputed_embeddings():
    bank = build(THREE, rng=np.random.default_rng(3))
    state = json.loads(json.dumps(bank.state_dict()))
    again = MemoryBank(CountingLLM(summaries()), BagEmbedder())
    again.load_state_dict(state)
    for q in ("zebra", "new job", "camping"):
        assert again.recall(q, budget_tokens=500, rng=None) == bank.recall(q, budget_tokens=500, rng=None)
    assert again.stats() == bank.stats()
    settings = bank.memory_settings()
    assert settings["forgetting"] == "stochastic" and settings["embedder"] == "bag" and "k" not in settings
    assert settings["forgetting_curve"] == "code"
    assert set(bank.stats()["settings_deviations"]) == {"decoding", "recall_lookup"}
    off = build(THREE, forgetting="off", simulate_recall=False).stats()["settings_deviations"]
    assert off["forgetting"].startswith("off") and "simulate_recall" in off
    assert bank.stats()["forgetting"] == "stochastic"


@pytest.mark.parametrize("kwargs, arg", [({"forgetting": "sometimes"}, "forgetting"), ({"k": 0}, "k"),
                                         ({"forgetting_curve": "book"}, "forgetting_curve"),
                                         ({"summary_ids": "all"}, "summary_ids"),
                                         ({"merge_chars": -1}, "merge_chars")])
def test_bad_arguments_name_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        MemoryBank(ScriptedLLM(["x"]), BagEmbedder(), **kwargs)
    with pytest.raises(ValueError, match="embedder"):
        MemoryBank(ScriptedLLM(["x"]), None)


# ---------------------------------------------------------------------------- the embedded model
@pytest.mark.slow
def test_end_to_end_on_smollm_first_two_sessions(smollm, minilm, locomo_path):
    conv = load_locomo(locomo_path)[0][0]
    conv = replace(conv, sessions=conv.sessions[:2])
    # Summaries capped at 64 tokens (default 400) to keep this test to a few minutes on 2 shared
    # CPU cores; `scgmem-run method=memorybank` runs the defaults.
    bank = MemoryBank(smollm, minilm, summary_max_new_tokens=64)
    t0 = time.perf_counter()
    bank.ingest(conv, np.random.default_rng(0))
    ingest_s = time.perf_counter() - t0
    stats = bank.stats()
    assert stats["sessions_alive"] >= 1 and stats["units"] >= 17
    out = bank.recall_batch([q.question for q in conv.qa[:2]], budget_tokens=[2000, 2000], rngs=[None, None])
    for r in out:
        assert smollm.count_tokens(r.context) <= 2000 and "Relevant memories" in r.context
        assert r.dia_ids and all(d.startswith(("D1:", "D2:")) for d in r.dia_ids)
    json.dumps(bank.state_dict())
    print(f"\nmemorybank smollm 2 sessions: ingest {ingest_s:.1f}s, usage {smollm.usage.snapshot()}, stats {stats}")
