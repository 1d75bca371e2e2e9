"""experiments/chance_evidence_recall.py: the random-retrieval floor for evidence recall."""
import pytest

from experiments.chance_evidence_recall import chance_recall, compare

TURNS = {f"D1:{i}" for i in range(1, 11)}  # a conversation of 10 turns


def test_chance_is_n_over_turns_times_gold_that_names_a_turn():
    assert chance_recall(["D1:1"], ["D1:2", "D1:3"], TURNS) == pytest.approx(0.2)
    assert chance_recall(["D1:1", "D9:9"], ["D1:2", "D1:3"], TURNS) == pytest.approx(0.1)  # D9:9 is no turn
    assert chance_recall([], ["D1:2"], TURNS) is None
    assert chance_recall(["D1:1"], [f"D1:{i}" for i in range(1, 11)] * 2, TURNS) == 1.0


def test_compare_by_category_and_all():
    records = [{"sample_id": "c", "category": 1, "evidence": ["D1:1"], "retrieved": ["D1:1", "D1:2"],
                "evidence_recall": 1.0},
               {"sample_id": "c", "category": 4, "evidence": ["D1:5"], "retrieved": ["D1:1"],
                "evidence_recall": 0.0},
               {"sample_id": "c", "category": 5, "evidence": [], "retrieved": [], "evidence_recall": None}]
    got = compare(records, {"c": TURNS})
    assert list(got) == ["multi_hop", "single_hop", "all"]
    assert got["multi_hop"] == {"n": 1, "evidence_recall": 1.0, "chance": pytest.approx(0.2), "ratio": pytest.approx(5.0)}
    assert got["all"]["n"] == 2 and got["all"]["chance"] == pytest.approx(0.15)
