"""The associative graph (Section 3.5): Eq. 10 on a hand-worked example."""
from __future__ import annotations

import json
import math

import pytest

from scgmem.core.graph import AssociativeGraph


def build():
    g = AssociativeGraph()
    for turn in (["a", "b"], ["a", "c"], ["a", "b", "b"], ["d"]):
        g.add_turn(turn)
    return g


def test_eq10_by_hand():
    g = build()
    # N = 4 turns; df: a 3, b 2, c 1, d 1; a and b co-occur in turns 1 and 3, a and c in turn 2.
    assert g.n_turns == 4 and dict(g.df) == {"a": 3, "b": 2, "c": 1, "d": 1}
    idf_a, idf_b, idf_c = math.log(4 / 3), math.log(4 / 2), math.log(4 / 1)
    assert g.weight("a", "b") == pytest.approx(idf_a * idf_b + idf_a * idf_b)  # sum over the two turns
    assert g.weight("b", "a") == g.weight("a", "b")
    assert g.weight("a", "c") == pytest.approx(idf_a * idf_c)
    assert g.weight("b", "c") == 0.0 and g.weight("a", "d") == 0.0
    names, weights = g.neighbours("a")
    assert names == ["b", "c"] and weights.tolist() == pytest.approx([2 * idf_a * idf_b, idf_a * idf_c])
    assert g.num_edges == 2
    assert sorted(map(tuple, (e[:2] for e in g.edges()))) == [("a", "b"), ("a", "c")]


def test_weights_follow_the_current_n_and_df():
    g = build()
    g.add_turn([])  # N grows with every turn, even one without concepts
    assert g.weight("a", "c") == pytest.approx(math.log(5 / 3) * math.log(5 / 1))
    g.add_turn(["c"])
    assert g.weight("a", "c") == pytest.approx(math.log(6 / 3) * math.log(6 / 2))


def test_state_roundtrip_is_json():
    g = build()
    state = json.loads(json.dumps(g.state_dict()))
    h = AssociativeGraph()
    h.load_state_dict(state)
    assert h.edges() == g.edges() and h.n_turns == g.n_turns and h.df == g.df
