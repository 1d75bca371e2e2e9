"""The hand-labelled judge fixture: each triple is what a committed run recorded, and the agreement math."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from experiments.judge_agreement import judge_fixture, read_fixture, report
from scgmem.llm.doubles.fake import ScriptedLLM
from scgmem.scoring.judge import NOT_MENTIONED, agreement

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "judge_labelled.jsonl"


def test_fixture_has_sixty_labelled_triples_of_every_kind():
    rows = read_fixture(FIXTURE)
    assert len(rows) == 60
    assert len({(r["source"], r["sample_id"], r["qa_index"]) for r in rows}) == 60
    kinds = Counter(r["kind"] for r in rows)
    assert {"paraphrase", "overlap", "partial", "date"} <= set(kinds)
    assert Counter(r["label"] for r in rows) == {"CORRECT": 20, "WRONG": 40}
    assert all(r["reason"].strip() for r in rows)


def test_fixture_triples_are_the_committed_runs_records():
    cache: dict[str, dict] = {}
    for row in read_fixture(FIXTURE):
        if row["source"] not in cache:
            lines = (ROOT / row["source"]).read_text(encoding="utf-8").splitlines()
            cache[row["source"]] = {(r["sample_id"], r["qa_index"]): r for r in map(json.loads, lines)}
        record = cache[row["source"]][(row["sample_id"], row["qa_index"])]
        assert (record["question"], record["prediction"], record["category"]) == \
            (row["question"], row["prediction"], row["category"])
        # the judge's gold: the reference, category 5 judged against "not mentioned" (scgmem.scoring.judge)
        assert row["gold"] == (NOT_MENTIONED if row["category"] == 5 else record["reference"])


def test_agreement_counts_kappa_and_confusion():
    out = agreement(["CORRECT", "CORRECT", "WRONG", "WRONG"], ["CORRECT", "WRONG", "WRONG", "WRONG"])
    assert out["agreement"] == 0.75
    # expected agreement: 0.5 * 0.25 + 0.5 * 0.75 = 0.5 -> kappa (0.75 - 0.5) / 0.5
    assert out["kappa"] == pytest.approx(0.5)
    assert out["confusion"] == {"CORRECT/CORRECT": 1, "CORRECT/WRONG": 1, "WRONG/WRONG": 2}
    assert agreement(["WRONG", "CORRECT"], ["CORRECT", "CORRECT"])["kappa"] is None  # one-label judge


def test_a_judge_that_always_says_correct_agrees_only_on_the_correct_third():
    rows = read_fixture(FIXTURE)
    judged = judge_fixture(rows, ScriptedLLM(["CORRECT"]), runs=1)
    out = report(rows, judged)
    assert out["agreement"] == pytest.approx(20 / 60) and out["kappa"] is None
    assert out["by_kind"]["cat5_refusal"]["agreement"] == 1.0 and out["by_kind"]["overlap"]["agreement"] == 0.0
