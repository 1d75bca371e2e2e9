"""MemoryBank's forgetting (baselines/memorybank/forgetting.py): both curves by hand, strengthening,
seeded replays, and what survives of conv-26."""
from __future__ import annotations

import math

import numpy as np
import pytest

from scgmem.baselines.memorybank.forgetting import ForgettingCurve
from experiments.memorybank_survival_lib import survival
from scgmem.data.locomo import load_locomo
from tests.baselines import CountingLLM
from tests.baselines.memorybank.inputs import THREE, BagEmbedder, FixedRng, build, conv_of, session, summaries

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
