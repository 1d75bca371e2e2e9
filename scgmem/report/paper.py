"""The paper's published numbers (results/paper/table1.csv, table2.csv) and the names the report prints.

The CSVs hold exactly what was typed from a source (results/paper/README.md): a blank cell
is a number we could not read from any source, never a guess. Two things are *computed*
here and flagged wherever they are printed:

- "derived" (†): an Average the source does not print (Table 2 prints none), computed as
  the paper defines it: the unweighted mean of the category values, rounded half-up to two
  decimals in exact decimal arithmetic (the rule that reproduces all 24 averages Table 1
  prints, e.g. 11.935 -> 11.94; results/paper/README.md).
- "secondary" (‡): a number read from a secondary summary of the SCG-Mem paper, not from the
  paper itself (source key `scgmem_secondary`; results/paper reads every number from the
  paper's text, so none carries this flag).
- "mismatch" (§): a relative change the paper prints (Table 1's "Improvement (%)", Table 2's
  "Performance Drop") that differs from the one recomputed from the paper's own rows
  (`scgmem.report.tables`).

Relative rows are typed as printed, in percent: `improvement` in table1.csv, and
`drop_<variant>` in table2.csv (`drop_row`).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from scgmem.scoring.metric_table import table_metrics, titles
from scgmem.method_lists import table1_baselines

METRICS = table_metrics()  # the columns of every table and figure (scgmem/scoring/metric_table.py)
# The LLM judge's accuracy (scgmem-report judge); a column only where a run was judged. The paper has none.
JUDGE = "judge"
METRIC_TITLES = {**titles(), JUDGE: "J"}
CATEGORY_TITLES = {"multi_hop": "Multi-hop", "temporal": "Temporal", "open_domain": "Open-domain",
                   "single_hop": "Single-hop", "adversarial": "Adversarial", "average": "Average",
                   "overall_weighted": "Overall (weighted)"}
# Table 1 rows in the paper's order; full_context is the paper's "LoCoMo" row (the whole transcript
# in the prompt), not to be read as rag_locomo (LoCoMo's retriever).
METHOD_TITLES = {"full_context": "LoCoMo (full context)", "readagent": "ReadAgent", "memorybank": "MemoryBank",
                 "memgpt": "MemGPT", "amem": "A-MEM", "scgmem": "SCG-Mem"}
# Methods of the harness that are not in the paper (shown below the paper's rows, never a "baseline").
EXTRA_TITLES = {"rag": "Dense RAG (not in the paper)", "rag_locomo": "RAG, LoCoMo's retriever (not in the paper)",
                "last_turns": "Last turns (not in the paper)"}
# Point labels of the figures and rows of the cost table: short, and the two "LoCoMo"s told apart.
SHORT_TITLES = {"full_context": "full context (LoCoMo)", "rag": "dense RAG", "rag_locomo": "RAG (LoCoMo retriever)",
                "last_turns": "last turns"}
# SCG-Mem's settings in the paper's main configuration (configs/method/scgmem.yaml; Figures 3-4's optima).
FULL_SETTINGS = {"k": 35, "hops": 1, "constraint": True, "evolution": True}
BASELINES = table1_baselines()  # configs/experiment/table1.yaml's order (scgmem/method_lists.py)
PAPER_MODELS = ("qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b")
# Table 2 rows: (method.constraint, method.evolution) -> variant.
VARIANTS = {(True, True): "full", (False, True): "no_constraint", (True, False): "no_evolution",
            (False, False): "no_both"}
VARIANT_TITLES = {"full": "SCG-Mem (full)", "no_constraint": "w/o Cognitive Constraint",
                  "no_evolution": "w/o Evolutionary Update", "no_both": "w/o both (not in the paper)"}
FLAG_MARKS = {"": "", "derived": "†", "secondary": "‡", "mismatch": "§"}
SECONDARY_SOURCES = ("scgmem_secondary",)
# Printed relative row of Table 1 ("Improvement (%)" per model); Table 2's drops are named by `drop_row`.
IMPROVEMENT_ROW = "improvement"


def run_title(method: str, setting=None) -> str:
    """A run's short name; an SCG-Mem run's names its settings, e.g. "SCG-Mem (k=35, hops=1)",
    "SCG-Mem (k=35, hops=1, w/o constraint)". `setting(key, default)` reads a method setting
    (`scgmem.report.collect.Run.setting`); without it, the paper's settings are assumed."""
    if method != "scgmem":
        return SHORT_TITLES.get(method) or METHOD_TITLES.get(method) or EXTRA_TITLES.get(method, method)
    get = setting or (lambda key, default: default)
    parts = [f"{key}={get(key, FULL_SETTINGS[key])}" for key in ("k", "hops")]
    parts += [f"w/o {key}" for key in ("constraint", "evolution") if not get(key, FULL_SETTINGS[key])]
    return f"SCG-Mem ({', '.join(parts)})"


def drop_row(variant: str) -> str:
    """table2.csv row holding the paper's printed drop of `variant`, e.g. "drop_no_constraint"."""
    return f"drop_{variant}"


def column(category: str, metric: str) -> str:
    """CSV column of a cell, e.g. ("multi_hop", "f1") -> "multi_hop_f1"."""
    return f"{category}_{metric}"


@dataclass(frozen=True)
class PaperValue:
    value: float
    flag: str = ""  # "", "derived" or "secondary" (see the module docstring)


class PaperTable:
    """The rows of one paper CSV, keyed by (model, row key), with the average derived where absent.

    Args:
        path: results/paper/table1.csv (row key column `method`) or table2.csv (`variant`).
        key: the name of the row key column.
    """

    def __init__(self, path: str | Path, key: str) -> None:
        self.path = Path(path)
        self.key = key
        self.rows: dict[tuple[str, str], dict] = {}
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: the paper's numbers are missing (see results/paper/README.md)")
        with open(self.path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for field in ("model", key, "source"):
                if field not in (reader.fieldnames or []):
                    raise ValueError(f"{self.path}: no {field!r} column (columns: {reader.fieldnames})")
            for n, row in enumerate(reader, 2):
                ident = (row["model"], row[key])
                if ident in self.rows:
                    raise ValueError(f"{self.path}:{n}: second row for {ident}")
                self.rows[ident] = row

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(m for m, _ in self.rows))

    def has_model(self, model: str) -> bool:
        return any(m == model for m, _ in self.rows)

    def value(self, model: str, row_key: str, category: str, metric: str,
              categories: list[str] | None = None) -> PaperValue | None:
        """The paper's number for one cell, or None. `categories` (the table's columns) lets a
        missing average be derived from them (flag "derived")."""
        row = self.rows.get((model, row_key))
        if row is None:
            return None
        flag = "secondary" if row["source"].startswith(SECONDARY_SOURCES) else ""
        raw = (row.get(column(category, metric)) or "").strip()
        if raw:
            try:
                return PaperValue(float(raw), flag)
            except ValueError:
                raise ValueError(f"{self.path}: {model}/{row_key} {column(category, metric)} = {raw!r} "
                                 "is not a number") from None
        if category == "average" and categories:
            parts = [self.value(model, row_key, c, metric) for c in categories]
            if parts and all(p is not None for p in parts):
                # Exact decimal mean, rounded half-up to two decimals (repr gives the typed digits:
                # a float mean would turn 11.935 into 11.934999... and round it down).
                total = sum(Decimal(repr(p.value)) for p in parts) / len(parts)
                mean = float(total.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
                return PaperValue(mean, "secondary" if any(p.flag == "secondary" for p in parts) else "derived")
        return None
