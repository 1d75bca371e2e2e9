"""The metric table (scgmem/scoring/metric_table.py) is the one place a metric is named: a toy metric
added there reaches both protocols' scores, the run's records, the per-category aggregate and
averages, and the CIs, without touching another file."""
from __future__ import annotations

import pytest

from scgmem.scoring import metric_table, metrics
from scgmem.scoring.metric_table import Metric
from scgmem.scoring.protocols import AmemProtocol, LocomoProtocol
from tests.scoring.test_protocols import CATS, qa


def exact(prediction: str, reference: str) -> float:
    return float(prediction.strip().lower() == reference.strip().lower())


@pytest.fixture
def with_exact_match(monkeypatch):
    rows = list(metric_table.METRICS)
    rows.insert(2, Metric("exact", "EM", "EM", function=exact))
    monkeypatch.setattr(metric_table, "METRICS", tuple(rows))


@pytest.mark.parametrize("cls", [AmemProtocol, LocomoProtocol])
def test_a_new_answer_metric_is_scored_by_every_protocol(with_exact_match, cls):
    protocol = cls(categories=CATS)
    scores = protocol.score(qa(4, answer="Paris"), "paris")
    assert list(scores) == ["f1", "bleu1", "exact"]
    assert scores["exact"] == 1.0
    assert protocol.score(qa(4, answer="Paris"), "London")["exact"] == 0.0


def test_a_new_metric_is_aggregated_and_given_cis(with_exact_match):
    records = [{"category": 4, "f1": 1.0, "bleu1": 1.0, "exact": 1.0, "evidence_recall": None},
               {"category": 4, "f1": 0.5, "bleu1": 0.2, "exact": 0.0, "evidence_recall": 1.0},
               {"category": 1, "f1": 0.0, "bleu1": 0.0, "exact": 0.0, "evidence_recall": 0.5}]
    out = metrics.aggregate(records, CATS)
    assert out["categories"]["single_hop"]["exact"] == pytest.approx(50.0)
    assert out["average"]["exact"] == pytest.approx(25.0)  # unweighted over the 2 scored categories
    assert out["overall_weighted"]["exact"] == pytest.approx(100 / 3)
    assert out["categories"]["single_hop"]["evidence_recall"] == pytest.approx(1.0)  # a fraction
    assert set(metrics.category_cis(records, CATS, n_resamples=50)["single_hop"]) == {"f1", "bleu1", "exact"}


def test_a_new_metric_reaches_the_run_records(with_exact_match, locomo_path, tmp_path):
    from scgmem.data.locomo import load_locomo, select
    from scgmem.testing.scripted import fake_pipeline

    conversations, _ = load_locomo(locomo_path)
    records = fake_pipeline("full_context", tmp_path / "run", parallel=1).run(
        select(conversations, ["conv-26"], max_sessions=1))
    assert records and all(r["exact"] in (0.0, 1.0) for r in records)
    assert list(records[0]).index("exact") == list(records[0]).index("bleu1") + 1


def test_an_answer_metric_without_a_function_must_be_scored_by_the_protocol(monkeypatch):
    monkeypatch.setattr(metric_table, "METRICS", (*metric_table.METRICS, Metric("rouge_l", "ROUGE-L", "RL")))
    with pytest.raises(ValueError, match="rouge_l"):
        AmemProtocol(categories=CATS).score(qa(4), "7 May 2023")


def test_the_report_and_the_summaries_name_only_table_metrics():
    from scgmem.report.paper import METRIC_TITLES, METRICS

    names = {m.name for m in metric_table.METRICS}
    assert METRICS == metric_table.table_metrics() and set(METRICS) <= names
    assert set(METRIC_TITLES) - {"judge"} == names
    records = [{"category": 1, "f1": 0.5, "bleu1": 0.5, "evidence_recall": 1.0, "bertscore_f1": 0.9}]
    out = metrics.aggregate(records, CATS)
    assert set(out["categories"]["multi_hop"]) - {"n"} <= names
    assert set(out["average"]) <= names
