"""Constructive recall (Section 3.6): propagation (Eq. 12-13) and context reconstruction."""
from __future__ import annotations

import numpy as np

from scgmem.api import Turn
from scgmem.core.graph import AssociativeGraph
from scgmem.core.recall import propagate, rank_turns, reconstruct_context


def star_graph():
    """hub - a..f (different strengths), a - x - y (a second hop), seeds far from each other."""
    g = AssociativeGraph()
    turns = [["hub", "a"], ["hub", "a"], ["hub", "b"], ["hub", "c"], ["hub", "d"], ["hub", "e"], ["hub", "f"],
             ["a", "x"], ["x", "y"], ["lonely"], ["q", "r"], ["filler"], ["filler"]]
    for t in turns:
        g.add_turn(t)
    return g


def test_hops_zero_returns_only_the_seeds():
    active = propagate(star_graph(), ["hub", "q"], k=35, hops=0, temperature=1.0, rng=np.random.default_rng(0))
    assert [c for c, _ in active] == ["hub", "q"]


def test_k_bounds_the_active_set_and_seeds_come_first():
    active = propagate(star_graph(), ["hub", "q"], k=5, hops=1, temperature=1.0, rng=np.random.default_rng(0))
    names = [c for c, _ in active]
    assert len(names) == 5 and names[:2] == ["hub", "q"] and "r" in names
    assert all(a <= 1.0 for _, a in active[2:])
    assert [a for _, a in active[2:]] == sorted((a for _, a in active[2:]), reverse=True)
    # k=0 is refused where the setting enters (SCGMem.__init__: tests/core/test_method.py), not here again


def test_same_seed_same_result_and_sampling_varies():
    g = star_graph()
    runs = {tuple(c for c, _ in propagate(g, ["hub"], k=3, hops=1, temperature=5.0, rng=np.random.default_rng(s)))
            for s in range(40)}
    again = [tuple(c for c, _ in propagate(g, ["hub"], k=3, hops=1, temperature=5.0, rng=np.random.default_rng(7)))
             for _ in range(3)]
    assert len(set(again)) == 1
    assert len(runs) > 1  # it does sample


def test_low_temperature_takes_the_heaviest_edge():
    # a co-occurs twice with hub: with T small the first draw is a, for any seed
    for s in range(10):
        active = propagate(star_graph(), ["hub"], k=2, hops=1, temperature=0.01, rng=np.random.default_rng(s))
        assert [c for c, _ in active] == ["hub", "a"]


def test_two_hops_reach_beyond_the_seed_neighbours():
    g = star_graph()
    one = propagate(g, ["x"], k=4, hops=1, temperature=1.0, rng=np.random.default_rng(0))
    two = propagate(g, ["x"], k=4, hops=2, temperature=1.0, rng=np.random.default_rng(0))
    assert {c for c, _ in one} == {"x", "a", "y"}  # x has only two neighbours
    assert "hub" in {c for c, _ in two}  # via a


def turn(dia_id, text, session):
    return Turn(dia_id=dia_id, speaker="Ann", text=text, session=session, date_time=f"day {session}")


def test_context_ranking_budget_and_chronology():
    turns = {t.dia_id: t for t in [turn("D1:1", "one", 1), turn("D1:2", "two", 1), turn("D2:1", "three", 2),
                                   turn("D2:2", "four four four four", 2)]}
    index = {"seed": ["D2:1", "D1:2"], "other": ["D1:1", "D2:2"]}
    turn_concepts = {"D2:1": ["seed"], "D1:2": ["seed", "other"], "D1:1": ["other"], "D2:2": ["other"]}
    order = rank_turns(["seed", "other"], index, turn_concepts)
    assert order == ["D1:2", "D2:1", "D1:1", "D2:2"]  # seed's turns first; within it, the one shared with "other"
    count = lambda text: len(text.replace("\n", " \n ").split())  # words and newlines, like BPE tokens  # noqa: E731
    text, ids = reconstruct_context(order, turns, 1000, count)
    assert ids == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert text.splitlines() == ["DATE: day 1", "Ann: one", "Ann: two", "DATE: day 2", "Ann: three",
                                 "Ann: four four four four"]
    text, ids = reconstruct_context(order, turns, 14, count)
    assert ids == ["D1:2", "D2:1"] and count(text) <= 14  # the lower-ranked turns are cut first
    assert reconstruct_context(order, turns, 0, count) == ("", [])


def meeting_memory():
    """'big' is grounded in six turns; 'small' and 'other' meet 'big' in one turn each."""
    index = {"big": ["D1:1", "D1:2", "D2:1", "D2:2", "D3:1", "D3:2"], "small": ["D1:2", "D3:3"],
             "other": ["D2:1", "D3:4"], "lone": ["D4:1"]}
    turn_concepts: dict[str, list[str]] = {}
    for concept, ids in index.items():
        for d in ids:
            turn_concepts.setdefault(d, []).append(concept)
    return index, turn_concepts


def test_each_concept_adds_a_bounded_number_of_turns():
    index, tc = meeting_memory()
    # one turn per concept: where most active concepts meet, then the newest
    assert rank_turns(["big", "small", "other"], index, tc, 1) == ["D2:1", "D1:2", "D3:4"]
    assert rank_turns(["big", "small"], index, tc, 1) == ["D1:2", "D3:3"]
    assert rank_turns(["big"], index, tc, 2) == ["D3:2", "D3:1"]  # nothing meets: the newest two


def test_the_context_grows_with_the_number_of_active_concepts():
    index, tc = meeting_memory()
    sizes = [len(rank_turns(active, index, tc, 1)) for active in (["big"], ["big", "small"],
                                                                  ["big", "small", "other", "lone"])]
    assert sizes == [1, 2, 4]
    # every turn of every concept: one frequent concept alone gives six turns
    assert len(rank_turns(["big"], index, tc, None)) == 6


def test_all_turns_per_concept_keeps_the_full_ranking():
    index, tc = meeting_memory()
    ranked = ["big", "small", "other"]
    # meeting turns first, then chronological; then the next concept's unseen turns
    assert rank_turns(ranked, index, tc, None) == ["D1:2", "D2:1", "D1:1", "D2:2", "D3:1", "D3:2", "D3:3",
                                                   "D3:4"]
    assert rank_turns(ranked, index, tc) == rank_turns(ranked, index, tc, None)
