"""The metrics of a run, each said once: its name (the key in predictions.jsonl and summary.json),
its title in tables and figures, which way is better, where its per-question value comes from, and
how it is aggregated. Scoring (`Protocol.score`), aggregation (`metrics.aggregate`,
`metrics.category_cis`), the run's records (harness/pipeline.py), wandb (harness/logger.py) and the
report (report/paper.py: the columns of Tables 1-2 and Figures 3-4) read this table, so adding a
metric is one row here plus its function (docs/architecture.md, "Add a metric").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# Where a metric's per-question value comes from.
ANSWER = "answer"        # the protocol scores the answer text against its reference
RETRIEVAL = "retrieval"  # the pipeline compares the evidence ids with the recalled ones
OPTIONAL = "optional"    # computed only when the run asks for it (BERTScore); absent otherwise


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    short: str  # the column abbreviation of compact tables (costs.md: "F1 / B1 / ER")
    higher_is_better: bool = True
    source: str = ANSWER
    # A 0..1 value per question that summaries report as a percentage (F1, BLEU-1); evidence recall
    # stays a 0..1 fraction.
    percent: bool = True
    # A column of Tables 1-2 and Figures 3-4, with per-category bootstrap CIs.
    in_tables: bool = True
    # (prediction, reference) -> 0..1, for an answer metric both protocols compute the same way.
    # None where each protocol has its own rule (A-MEM's and LoCoMo's F1 differ; LoCoMo scores
    # category 5's BLEU-1 on the chosen option), so the protocol's `own_scores` returns it.
    function: Callable[[str, str], float] | None = None


METRICS: tuple[Metric, ...] = (
    Metric("f1", "F1", "F1"),
    Metric("bleu1", "BLEU-1", "B1"),
    Metric("bertscore_f1", "BERTScore F1", "BS", source=OPTIONAL, in_tables=False),
    Metric("evidence_recall", "Evidence recall", "ER", source=RETRIEVAL, percent=False, in_tables=False),
)


def answer_metrics() -> tuple[Metric, ...]:
    """The metrics every protocol's score() returns, in the order records list them."""
    return tuple(m for m in METRICS if m.source == ANSWER)


def percent_metrics() -> tuple[Metric, ...]:
    """The metrics summaries average per category and over categories, in percent."""
    return tuple(m for m in METRICS if m.percent)


def fraction_metrics() -> tuple[Metric, ...]:
    """Per-category 0..1 means over the questions that have a value (evidence recall)."""
    return tuple(m for m in METRICS if not m.percent)


def record_metrics() -> tuple[str, ...]:
    """The names of the scores every prediction record carries: the answer metrics, then the
    fractions (evidence recall)."""
    return tuple(m.name for m in (*answer_metrics(), *fraction_metrics()))


def table_metrics() -> tuple[str, ...]:
    """The names of the report's metric columns (and of the CIs summaries carry), in order."""
    return tuple(m.name for m in METRICS if m.in_tables)


def cost_metrics() -> tuple[Metric, ...]:
    """The per-category columns of the cost table: the table metrics, then the fractions."""
    return tuple(m for m in METRICS if m.in_tables) + fraction_metrics()


def titles() -> dict[str, str]:
    return {m.name: m.title for m in METRICS}
