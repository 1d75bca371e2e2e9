"""MemoryBank (baselines/memorybank.py): units, summaries, forgetting curve, strengthening, retrieval, cache."""
from __future__ import annotations

import json
import math
import re
import time
import zlib
from dataclasses import replace

import numpy as np
import pytest

from baselines.memorybank import MemoryBank
from baselines.memorybank_forgetting import ForgettingCurve
from baselines.memorybank_survival import survival
from baselines.memorybank_units import pair_turns
from scgmem.api import Conversation, Session, Turn
from scgmem.data.locomo import load_locomo
from scgmem.llm.fake import ScriptedLLM
from tests.baselines import CountingLLM


class BagEmbedder:
    """Deterministic bag-of-words vectors (crc32 buckets), unit length; stop-ish words ignored."""

    name = "bag"
    IGNORE = {"conversation", "content", "on", "may", "2023", "pm", "1", "56", "a", "b", "the", "summary",
              "of", "is", "june"}

    def encode(self, texts):
        out = np.zeros((len(texts), 4096), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                if w not in self.IGNORE and not w.isdigit():
                    out[i, zlib.crc32(w.encode()) % 4096] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class FixedRng:
    """Stands in for np.random.Generator: `random()` returns the scripted draws in turn."""

    def __init__(self, draws):
        self.draws = list(draws)
        self.used = 0

    def random(self):
        value = self.draws[self.used % len(self.draws)]
        self.used += 1
        return value


def session(index: int, day: int, texts: list[tuple[str, str]], month: str = "May") -> Session:
    date = f"1:56 pm on {day} {month}, 2023"
    return Session(index, date, tuple(Turn(f"D{index}:{k}", spk, txt, index, date)
                                      for k, (spk, txt) in enumerate(texts, 1)))


def conv_of(*sessions: Session) -> Conversation:
    return Conversation("conv-x", "A", "B", tuple(sessions), ())


def summaries(event="They talked about zebras.", personality="A is kind; B is curious.",
              overall="Overall, zebras.", portrait="Both are friendly."):
    def reply(prompt: str) -> str:
        if "summarize the following dialogue" in prompt:
            return event
        if "personality traits and emotions of" in prompt:
            return personality
        if "highly concise summary of the following events" in prompt:
            return overall
        return portrait
    return reply


def build(conv, llm=None, rng=None, **kw) -> MemoryBank:
    bank = MemoryBank(llm or CountingLLM(summaries()), kw.pop("embedder", BagEmbedder()), **kw)
    bank.ingest(conv, rng if rng is not None else np.random.default_rng(0))
    return bank


THREE = conv_of(session(1, 1, [("A", "zebra stripes"), ("B", "lovely zebra"), ("A", "pottery class"),
                               ("B", "nice pottery")]),
                session(2, 3, [("A", "camping trip"), ("B", "tent rain")]),
                session(3, 4, [("A", "new job"), ("B", "congrats job")]))


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


# ---------------------------------------------------------------------------- the forgetting curve
PAPER, CODE = ForgettingCurve("paper"), ForgettingCurve("code")


def unit(anchor: int, level: int = 0, kind: str = "pair", day: int = 0, alive: bool = True) -> dict:
    return {"alive": alive, "anchor": anchor, "level": level, "kind": kind, "day": day}


def test_paper_retention_is_exp_minus_t_over_s():
    assert PAPER.retention(0, 0) == 1.0
    assert PAPER.retention(1, 0) == pytest.approx(math.exp(-1))  # S = 1
    assert PAPER.retention(2, 1) == pytest.approx(math.exp(-1))  # S = 2
    assert PAPER.retention(6, 2) == pytest.approx(math.exp(-2))  # S = 3
    assert PAPER.retention(6, 0) == pytest.approx(0.00248, abs=1e-5)  # LoCoMo's median gap, level 0


def test_code_retention_is_what_exp_minus_t_over_5_times_s_computes():
    for t, level in ((0, 0), (6, 0), (6, 2), (3, 7)):
        strength = level + 1  # memory_strength starts at 1
        assert CODE.retention(t, level) == math.exp(-t / 5 * strength)  # the code's expression, verbatim
    assert CODE.retention(6, 0) == pytest.approx(0.301, abs=1e-3)  # LoCoMo's median gap, never recalled
    assert CODE.retention(6, 1) < CODE.retention(6, 0)  # a recalled unit fades faster, as the code reads


def test_paper_pass_keeps_with_probability_r_and_deletes_at_30_days():
    units = [unit(9),            # t=1, R=0.368
             unit(9),            # t=1
             unit(8, level=1),   # t=2, S=2, R=0.368
             unit(-20, level=2),  # t=30: deleted whatever the draw
             unit(10, alive=False)]  # gone already: no draw
    rng = FixedRng([0.30, 0.40, 0.36])
    assert PAPER.forgetting_pass(units, 10, rng) == 2
    assert [u["alive"] for u in units] == [True, False, True, False, False]
    assert rng.used == 3 and units[1]["forgotten_day"] == 10


def test_code_pass_has_no_age_cutoff_and_summaries_follow_their_day():
    units = [unit(-100, day=-100),                     # t=110, R=e^-22: only a 0.0 draw keeps it
             unit(9, day=9), unit(9, day=9),           # t=1, R=e^-0.2=0.819
             unit(9, kind="summary", day=9),            # no draw: kept while a day-9 dialog is
             unit(5, day=5),                            # t=5, R=e^-1=0.368
             unit(5, kind="summary", day=5)]            # its day's only dialog goes: it goes too
    rng = FixedRng([0.0, 0.9, 0.5, 0.5])
    assert CODE.forgetting_pass(units, 10, rng) == 3
    assert [u["alive"] for u in units] == [True, False, True, True, False, False]
    assert rng.used == 4  # summaries draw nothing


def test_strengthening_paper_caps_the_level_code_does_not_and_skips_summaries():
    a, b, s = unit(0), unit(0), unit(0, kind="summary")
    for day in (1, 2, 3, 4):
        PAPER.strengthen(a, day)
        CODE.strengthen(b, day)
    assert (a["level"], a["anchor"]) == (2, 4) and (b["level"], b["anchor"]) == (4, 4)
    assert not CODE.strengthen(s, 5) and s["level"] == 0 and s["anchor"] == 0
    assert PAPER.strengthen(s, 5) and s["level"] == 1


def test_code_curve_keeps_a_summary_while_its_session_lives():
    bank = build(THREE, rng=FixedRng([0.0]), simulate_recall=False, forgetting_curve="code")
    assert all(u["alive"] for u in bank.units)  # draws of 0.0 keep every dialog: summaries stay
    bank = build(THREE, rng=FixedRng([0.99]), simulate_recall=False, forgetting_curve="code")
    # Day 3: session 1's dialogs (t=2, R=0.67) go, and its summary with them; day 4: session 2's
    # (t=1, R=0.82) go too. Session 3 is inserted after the last pass: whole.
    assert {(u["session"], u["kind"]) for u in bank.units if u["alive"]} == {(3, "pair"), (3, "summary")}
    assert bank.stats()["forgetting_curve"] == "code" and bank.memory_settings()["forgetting_curve"] == "code"


def test_replay_by_hand_three_sessions():
    # Days 1, 3, 4; draws always 0.1, no simulated recall.
    # Pass on day 3: session-1 units t=2, R=e^-2=0.135 > 0.1: kept.
    # Pass on day 4: session-1 units t=3, R=0.050 <= 0.1: forgotten; session-2 t=1, R=0.368: kept.
    bank = build(THREE, rng=FixedRng([0.1]), simulate_recall=False, forgetting_curve="paper")
    alive = {u["session"] for u in bank.units if u["alive"]}
    assert alive == {2, 3}
    assert bank.stats()["sessions_alive"] == 2 and bank.counters["forgotten"] == 3
    assert bank.qa_day - bank.sessions[0]["day"] == 3


def test_units_older_than_30_days_are_deleted_even_with_lucky_draws():
    late = session(4, 15, [("A", "holiday"), ("B", "beach")], month="June")  # 42 days after day 4 May
    bank = build(conv_of(*THREE.sessions, late), rng=FixedRng([0.0]), simulate_recall=False, forgetting_curve="paper")
    assert {u["session"] for u in bank.units if u["alive"]} == {4}


def test_simulated_recall_strengthens_the_hit_and_it_survives():
    # No summaries. Units: 0 zebra pair, 1 pottery pair (day 1), 2 session-2 pair (day 3), 3 (day 4).
    # Pass on day 3 (draws 0.1, 0.1): units 0, 1 have t=2, R=e^-2=0.135 > 0.1: kept.
    # Session 2's two turns mention zebras: each strengthens its top-1 hit, unit 0 -> level 2,
    # anchor day 3. Pass on day 4 (draws 0.5): unit 0 t=1, S=3, R=0.72 > 0.5 survives; the equally
    # old pottery pair (t=3, S=1, R=0.05) and unit 2 (t=1, S=1, R=0.37) are forgotten.
    s2 = session(2, 3, [("A", "zebra stripes again"), ("B", "lovely zebra indeed")])
    conv = conv_of(THREE.sessions[0], s2, THREE.sessions[2])
    rng = FixedRng([0.1, 0.1, 0.5, 0.5, 0.5])
    bank = build(conv, llm=CountingLLM(summaries(event="")), rng=rng, recall_strengthen_k=1, forgetting_curve="paper")
    assert rng.used == 5
    zebra, pottery, s2_pair, s3_pair = bank.units
    assert zebra["alive"] and zebra["level"] == 2
    assert zebra["anchor"] == bank.sessions[2]["day"]  # session 3's turns hit it again (the only one left)
    assert not pottery["alive"] and pottery["level"] == 0 and not s2_pair["alive"] and s3_pair["alive"]
    assert bank.counters["strengthened"] == 2 + 2
    r = bank.recall("zebra stripes", budget_tokens=1000, rng=None)
    assert r.dia_ids == ["D1:1", "D1:2", "D3:1", "D3:2"]


def test_strengthening_is_capped_at_level_2():
    s2 = session(2, 2, [("A", "zebra stripes"), ("B", "lovely zebra"), ("A", "zebra zebra"), ("B", "zebra")])
    bank = build(conv_of(THREE.sessions[0], s2), llm=CountingLLM(summaries(event="")),
                 rng=FixedRng([0.0]), recall_strengthen_k=1, forgetting_curve="paper")
    assert bank.units[0]["level"] == 2


def test_same_seed_same_memory():
    a = build(THREE, rng=np.random.default_rng(7))
    b = build(THREE, rng=np.random.default_rng(7))
    assert a.state_dict() == b.state_dict()


def test_paper_forgetting_keeps_about_one_session_of_conv26(locomo_path):
    """With day units and no recalls, ~1.0-1.4 sessions survive to QA.

    conv-26's last sessions are on 20 and 22 October: the last one is whole (t = 0), each pair of
    the one before survives with R = e^-2 = 0.135, everything older is practically gone.
    """
    conv = load_locomo(locomo_path)[0][0]
    equivalents = []
    for seed in range(5):
        stats = build(conv, rng=np.random.default_rng(seed), simulate_recall=False, forgetting_curve="paper").stats()
        equivalents.append(stats["sessions_alive_equivalent"])
        assert 1 <= stats["sessions_alive"] <= 2 and stats["summaries_alive"] <= 2
    assert 1.0 <= np.mean(equivalents) <= 1.4, equivalents
    bank = build(conv, rng=np.random.default_rng(0), forgetting_curve="paper")  # with simulated recall: about the same
    assert bank.stats()["sessions_alive_equivalent"] <= 1.5 and bank.overall_summary


def test_code_forgetting_keeps_the_last_session_and_two_thirds_of_the_one_before_on_conv26(locomo_path):
    """Under `code` a pass draws with t = days since the anchor, so survival compounds over passes.

    conv-26's last gaps are 7 and 2 days: the last session is whole, each unit of the one before
    survives with e^-0.4 = 0.67, the one before that with e^-1.4 x e^-1.8 = 0.04: ~1.7 sessions.
    """
    conv = load_locomo(locomo_path)[0][0]
    result = survival(conv, BagEmbedder(), "code", simulate_recall=False, seeds=5)
    assert 1.4 <= result["sessions_alive_equivalent"] <= 2.0, result
    assert result["units"] == 214 and result["sessions"] == 19


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
