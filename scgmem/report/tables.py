"""Table 1 and Table 2 of the paper from finished runs, the paper's numbers beside ours.

Table 1 (paper Section 4.5): per model, one row per method, F1 and BLEU-1 per category, their
unweighted average (the paper's "Average") and the question-weighted overall (LoCoMo's
"Overall"; ours only, the paper prints none), plus the paper's "Improvement (%)" row (SCG-Mem
relative to the strongest baseline of each column). Table 2 (Section 4.6): SCG-Mem and its
ablations, each ablation followed by its "Performance Drop" (relative to the full model).
Relative rows show the paper's printed value, flagged § where it differs from the value
recomputed from the paper's own rows. Every cell carries

- ours: the run's summary value (percent);
- a bootstrap 95% CI over the run's questions (`scgmem.scoring.metrics.category_cis`; for the
  average, `average_ci`, which resamples within each category and averages the means);
- the paper's value (results/paper/*.csv, flags in `scgmem.report.paper`) and ours - paper.

Below each block, a paired bootstrap (`scgmem.report.paired.paired_mean`: two-sided p, questions
matched by (sample_id, qa_index)): SCG-Mem against the strongest baseline of each category (Table 1)
or the full model against each ablation (Table 2). Table 1's "Improvement (%)" compares SCG-Mem with
the paper's five baselines only, as the paper's printed row does; where we ran methods the paper
does not have (both RAGs), "Improvement over every run (%)" compares it with the strongest of all.
Writers: `scgmem.report.writers`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scgmem.harness.paper_settings import deviations
from scgmem.report.collect import Run, caveats, index_runs, shown_path
from scgmem.scoring.cat5 import ADVERSARIAL
from scgmem.scoring.cat5 import summary_fields as cat5_fields
from scgmem.scoring.metrics import average_ci, bootstrap_ci, category_cis
from scgmem.report.paired import N_RESAMPLES, paired_mean
from scgmem.report.paper import (BASELINES, EXTRA_TITLES, IMPROVEMENT_ROW, JUDGE, METHOD_TITLES, METRICS, PAPER_MODELS,
                                 VARIANT_TITLES, VARIANTS, PaperTable, column, drop_row, run_title)

# The question-weighted overall (LoCoMo's "Overall"); the paper prints no such column.
OVERALL = "overall_weighted"

log = logging.getLogger(__name__)


@dataclass
class Cell:
    """One number of a table. `unit` is "" for scores (percent points) and "%" for the
    Improvement row (relative change)."""

    ours: float | None = None
    ci: tuple[float, float] | None = None
    paper: float | None = None
    paper_flag: str = ""
    unit: str = ""

    @property
    def diff(self) -> float | None:
        return None if self.ours is None or self.paper is None else self.ours - self.paper


@dataclass
class Row:
    key: str  # method name (Table 1) or variant (Table 2); "improvement" for that row
    label: str
    cells: dict[str, Cell] = field(default_factory=dict)  # column(category, metric) -> Cell
    n: int | None = None
    run_dir: str | None = None
    # How the run departs from the paper's settings (scgmem.harness.paper_settings.deviations).
    deviations: list[str] = field(default_factory=list)
    # Category 5 apart (`category5_apart`): the average over categories 1-4 and the category-5 answer rates.
    cat5: dict | None = None


@dataclass
class Block:
    """All rows of one model, compared with the paper's rows of `paper_model`."""

    model: str
    paper_model: str | None
    rows: list[Row] = field(default_factory=list)
    paired: list[dict] = field(default_factory=list)


@dataclass
class Table:
    name: str  # "table1" or "table2": the output file stem
    title: str
    categories: list[str]  # category columns; "average" is added after them
    blocks: list[Block] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics: tuple[str, ...] = METRICS  # + JUDGE when a run was judged

    @property
    def column_groups(self) -> list[str]:
        return [*self.categories, "average", OVERALL]


def _metrics(runs: list[Run]) -> tuple[str, ...]:
    """The table's metrics: F1, BLEU-1, and J (the LLM judge) when any run has judgements."""
    return (*METRICS, JUDGE) if any(r.judge for r in runs) else METRICS


def _judge_cells(run: Run, mapping: dict[int, str], n_resamples: int, seed: int) -> dict[str, Cell]:
    """J per category, the paper-style average and the weighted overall (percent): each question's
    share of CORRECT runs, averaged, with bootstrap CIs over questions (as F1's)."""
    rows = [{"category": int(r["category"]), JUDGE: run.judge[(r["sample_id"], int(r["qa_index"]))]}
            for r in run.records if int(r["category"]) in mapping and (r["sample_id"], int(r["qa_index"])) in run.judge]
    cells, means = {}, []
    for num, name in mapping.items():
        values = [100.0 * r[JUDGE] for r in rows if r["category"] == num]
        if values:
            means.append(float(np.mean(values)))
        cells[column(name, JUDGE)] = Cell(ours=means[-1] if values else None,
                                          ci=bootstrap_ci(values, n_resamples, seed) if values else None)
    cells[column("average", JUDGE)] = Cell(ours=float(np.mean(means)) if means else None,
                                           ci=average_ci(rows, mapping, JUDGE, n_resamples, seed))
    values = [100.0 * r[JUDGE] for r in rows]
    cells[column(OVERALL, JUDGE)] = Cell(ours=float(np.mean(values)) if values else None,
                                         ci=bootstrap_ci(values, n_resamples, seed) if values else None)
    return cells


def _check_categories(runs: list[Run]) -> list[str]:
    categories = runs[0].categories
    for run in runs[1:]:
        if run.categories != categories:
            raise ValueError(f"runs score different categories: {runs[0].run_dir} has {categories}, "
                             f"{run.run_dir} has {run.categories}; report them separately")
    return categories


def _our_row(run: Run, key: str, label: str, categories: list[str], n_resamples: int, seed: int) -> Row:
    """Summary values and bootstrap CIs of one run."""
    mapping = {num: name for num, name in run.category_mapping.items() if name in categories}
    cis = category_cis(run.records, mapping, n_resamples=n_resamples, seed=seed)
    row = Row(key=key, label=label, n=int(run.summary.get("n_questions", len(run.records))),
              run_dir=shown_path(run.run_dir), deviations=deviations(run.config, run.summary))
    for cat in categories:
        for metric in METRICS:
            ci = cis.get(cat, {}).get(metric)
            row.cells[column(cat, metric)] = Cell(ours=run.summary["categories"][cat][metric],
                                                  ci=tuple(ci) if ci else None)
    scored = [r for r in run.records if int(r["category"]) in mapping]
    for metric in METRICS:
        row.cells[column("average", metric)] = Cell(
            ours=run.summary["average"][metric],
            ci=average_ci(run.records, mapping, metric, n_resamples=n_resamples, seed=seed))
        # From the records, so that runs written before summary.json had `overall_weighted` show it too.
        values = [100.0 * float(r[metric]) for r in scored]
        row.cells[column(OVERALL, metric)] = Cell(
            ours=float(np.mean(values)) if values else None,
            ci=bootstrap_ci(values, n_resamples, seed) if values else None)
    row.cat5 = category5_apart(run, mapping, n_resamples, seed)
    if run.judge:
        row.cells.update(_judge_cells(run, mapping, n_resamples, seed))
    return row


def category5_apart(run: Run, mapping: dict[int, str], n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict:
    """From the run's records (so runs written before summary.json had them show them too): the
    average over the scored categories 1-4 with its bootstrap CI, and the category-5 answer rates
    (`scgmem.scoring.cat5`); None values where the run scores no such question."""
    without5 = {c: n for c, n in mapping.items() if c != ADVERSARIAL}
    fields = cat5_fields(run.records, mapping, run.summary.get("protocol"))
    out = {"average_1_4": fields["average_1_4"], "category5": fields["category5"], "average_1_4_ci": {}}
    for metric in METRICS:
        out["average_1_4_ci"][metric] = average_ci(run.records, without5, metric, n_resamples=n_resamples,
                                                   seed=seed) if without5 else None
    return out


def _add_paper(row: Row, paper: PaperTable, paper_model: str | None, key: str, categories: list[str]) -> None:
    if paper_model is None:
        return
    for cat in [*categories, "average"]:  # the paper has no weighted overall
        for metric in METRICS:
            value = paper.value(paper_model, key, cat, metric, categories)
            cell = row.cells.setdefault(column(cat, metric), Cell())
            if value is not None:
                cell.paper, cell.paper_flag = value.value, value.flag


def _paper_model(model: str, paper: PaperTable, fallback: str | None) -> str | None:
    served = model.split("@", 1)[0]  # a served run's model reads `<model>@<backend>` (configs/backend/)
    return served if paper.has_model(served) else fallback


def _relative(new: float | None, best: float | None) -> float | None:
    """100 * (new - best) / best: the paper's Improvement (e.g. 17.23 -> 42.51 is +146.7%)."""
    if new is None or best is None or best <= 0:
        return None
    return 100.0 * (new - best) / best


def _relative_cell(ours: float | None, paper_new: float | None, paper_base: float | None,
                   printed: float | None) -> Cell:
    """A relative-change cell: ours, and the paper's printed value (flag "mismatch" when it differs
    from the one recomputed from the paper's rows at the paper's one decimal), else the recomputed one."""
    recomputed = _relative(paper_new, paper_base)
    if printed is None:
        return Cell(ours=ours, paper=recomputed, unit="%")
    differs = recomputed is not None and round(recomputed, 1) != round(printed, 1)
    return Cell(ours=ours, paper=printed, paper_flag="mismatch" if differs else "", unit="%")


def _printed(paper: PaperTable, paper_model: str | None, row_key: str, col: str) -> float | None:
    if paper_model is None:
        return None
    category, metric = col.rsplit("_", 1)
    value = paper.value(paper_model, row_key, category, metric)
    return None if value is None else value.value


def _improvement(rows: dict[str, Row], table: Table, paper: PaperTable, paper_model: str | None) -> Row | None:
    """SCG-Mem relative to the strongest of the paper's baselines in each column, ours and the paper's."""
    scg = rows.get("scgmem")
    if scg is None:
        return None
    out = Row(key=IMPROVEMENT_ROW, label="Improvement (%)")
    for col in (column(c, m) for c in table.column_groups for m in METRICS):
        ours = [r.cells[col].ours for k, r in rows.items() if k in BASELINES and r.cells.get(col)]
        theirs = [r.cells[col].paper for k, r in rows.items() if k in BASELINES and r.cells.get(col)]
        ours, theirs = [v for v in ours if v is not None], [v for v in theirs if v is not None]
        scg_cell = scg.cells.get(col, Cell())
        out.cells[col] = _relative_cell(_relative(scg_cell.ours, max(ours, default=None)), scg_cell.paper,
                                        max(theirs, default=None), _printed(paper, paper_model, IMPROVEMENT_ROW, col))
        if scg_cell.paper_flag == "secondary" and out.cells[col].paper is not None:
            out.cells[col].paper_flag = "secondary"
    return out


def _improvement_over_all(rows: dict[str, Row], table: Table) -> Row | None:
    """SCG-Mem relative to the strongest of every other row we ran (the paper's baselines and the
    methods it does not have), ours only; None when we ran no method outside the paper's baselines."""
    scg = rows.get("scgmem")
    others = {k: r for k, r in rows.items() if k != "scgmem" and r.run_dir is not None}
    if scg is None or not set(others) - set(BASELINES):
        return None
    out = Row(key=f"{IMPROVEMENT_ROW}_all", label="Improvement over every run (%)")
    for col in (column(c, m) for c in table.column_groups for m in METRICS):
        best = max((r.cells[col].ours for r in others.values() if r.cells.get(col) and r.cells[col].ours is not None),
                   default=None)
        out.cells[col] = Cell(ours=_relative(scg.cells.get(col, Cell()).ours, best), unit="%")
    return out


def _drop(full: Row, ablation: Row, table: Table, paper: PaperTable, paper_model: str | None) -> Row:
    """Table 2's "Performance Drop": the ablation relative to the full model, ours and the paper's."""
    out = Row(key=drop_row(ablation.key), label="Performance Drop (%)")
    for col in (column(c, m) for c in table.column_groups for m in METRICS):
        f, a = full.cells.get(col, Cell()), ablation.cells.get(col, Cell())
        out.cells[col] = _relative_cell(_relative(a.ours, f.ours), a.paper, f.paper,
                                        _printed(paper, paper_model, drop_row(ablation.key), col))
    return out


def paired_rows(a: Run, b: Run, a_label: str, b_label: str, categories: list[str],
                n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[dict]:
    """Paired bootstrap of run `a` against run `b` per category and metric, in percent points.

    Questions are matched by (sample_id, qa_index); those in only one run are left out
    (counted in `unmatched`). p_value is two-sided (`scgmem.report.paired.paired_mean`)."""
    a_by = {(r["sample_id"], r["qa_index"]): r for r in a.records}
    b_by = {(r["sample_id"], r["qa_index"]): r for r in b.records}
    shared = sorted(a_by.keys() & b_by.keys())
    unmatched = len(a_by.keys() ^ b_by.keys())
    mapping = {name: num for num, name in a.category_mapping.items()}
    out = []
    for cat in categories:
        keys = [k for k in shared if int(a_by[k]["category"]) == mapping.get(cat)]
        for metric in METRICS:
            row = {"category": cat, "metric": metric, "a": a_label, "b": b_label, "n": len(keys),
                   "unmatched": unmatched, "diff": None, "ci_low": None, "ci_high": None, "p_value": None}
            if keys:
                res = paired_mean([100.0 * float(a_by[k][metric]) for k in keys],
                                  [100.0 * float(b_by[k][metric]) for k in keys], n_resamples=n_resamples, seed=seed)
                row.update(res)
            out.append(row)
    return out


def build_table1(runs: list[Run], paper: PaperTable, *, default_paper_model: str | None = "llama3.2-1b",
                 n_resamples: int = N_RESAMPLES, seed: int = 0) -> Table:
    """Table 1 from runs of any models and methods.

    Args:
        runs: finished runs (`scgmem.report.collect.collect`).
        paper: results/paper/table1.csv.
        default_paper_model: the paper model whose numbers stand beside a model the paper did not
            run (e.g. the embedded SmolLM2-135M); None = none. Llama-3.2-1B is the paper's smallest.
        n_resamples, seed: of every bootstrap.
    """
    categories = _check_categories(runs)
    table = Table(name="table1", title="Table 1: F1 / BLEU-1 (%) per category on LoCoMo", categories=categories,
                  metrics=_metrics(runs), notes=caveats(runs))  # partial merges, unchecked references
    by_model: dict[str, dict[str, Run]] = {}
    for (model, method), run in index_runs(runs, lambda r: (r.model, r.method)).items():
        by_model.setdefault(model, {})[method] = run
    order = [m for m in PAPER_MODELS if m in by_model] + sorted(m for m in by_model if m not in PAPER_MODELS)
    for model in order:
        methods = by_model[model]
        block = Block(model=model, paper_model=_paper_model(model, paper, default_paper_model))
        keys = [m for m in METHOD_TITLES if m in methods or (block.paper_model, m) in paper.rows]
        keys += sorted(m for m in methods if m not in METHOD_TITLES)  # e.g. rag, last_turns
        rows: dict[str, Row] = {}
        for key in keys:
            label = METHOD_TITLES.get(key) or EXTRA_TITLES.get(key, key)
            run = methods.get(key)
            rows[key] = (_our_row(run, key, label, categories, n_resamples, seed) if run else Row(key=key, label=label))
            _add_paper(rows[key], paper, block.paper_model, key, categories)
        block.rows = list(rows.values())
        improvement = _improvement(rows, table, paper, block.paper_model)
        over_all = _improvement_over_all(rows, table)
        block.rows += [r for r in (improvement, over_all) if r is not None]
        if over_all is not None:
            extra = " and ".join(run_title(k) for k in rows if k not in BASELINES and k != "scgmem" and rows[k].run_dir)
            note = (f"{block.model}: Improvement (%) compares SCG-Mem with the paper's five baselines only (LoCoMo "
                    f"(full context), ReadAgent, MemoryBank, MemGPT, A-MEM), as the paper's printed row does, and "
                    f"leaves out {extra}; Improvement over every run (%) compares it with the strongest of every "
                    "row we ran, those included. The paired bootstrap below takes the strongest of the paper's baselines.")
            table.notes.append(note)
        block.paired = _paired_vs_strongest(methods, categories, n_resamples, seed)
        table.blocks.append(block)
    return table


def _paired_vs_strongest(methods: dict[str, Run], categories: list[str], n_resamples: int, seed: int) -> list[dict]:
    """SCG-Mem against the strongest baseline (highest mean) of each category and metric. The
    candidates are the paper's baselines we ran, or, without any, every other method we ran;
    a tie goes to the first in the paper's row order."""
    scg = methods.get("scgmem")
    candidates = {k: methods[k] for k in BASELINES if k in methods} or \
        {k: methods[k] for k in sorted(methods) if k != "scgmem"}
    if scg is None or not candidates:
        return []
    out = []
    for cat in categories:
        for metric in METRICS:
            best = max(candidates, key=lambda k: candidates[k].summary["categories"][cat][metric] or 0.0)
            rows = paired_rows(scg, candidates[best], "scgmem", best, [cat], n_resamples, seed)
            out.extend(r for r in rows if r["metric"] == metric)
    return out


def variant_of(run: Run) -> str:
    """Table 2 row of an SCG-Mem run, from its method.constraint / method.evolution settings."""
    return VARIANTS[(bool(run.setting("constraint", True)), bool(run.setting("evolution", True)))]


def build_table2(runs: list[Run], paper: PaperTable, *, default_paper_model: str | None = "qwen2.5-3b",
                 n_resamples: int = N_RESAMPLES, seed: int = 0) -> Table:
    """Table 2 (ablations) from SCG-Mem runs; other methods are ignored (logged)."""
    scg = [r for r in runs if r.method == "scgmem"]
    for r in runs:
        if r.method != "scgmem":
            log.warning("table2: ignoring %s (method %s, not scgmem)", r.run_dir, r.method)
    if not scg:
        raise ValueError("table2: no scgmem run among the runs given")
    categories = _check_categories(scg)
    table = Table(name="table2", title="Table 2: ablations of SCG-Mem, F1 / BLEU-1 (%) per category",
                  categories=categories, metrics=_metrics(scg), notes=caveats(scg))
    by_model: dict[str, dict[str, Run]] = {}
    for (model, variant), run in index_runs(scg, lambda r: (r.model, variant_of(r))).items():
        by_model.setdefault(model, {})[variant] = run
    for model in sorted(by_model):
        variants = by_model[model]
        block = Block(model=model, paper_model=_paper_model(model, paper, default_paper_model))
        for key in VARIANT_TITLES:
            if key not in variants and (block.paper_model, key) not in paper.rows:
                continue
            run = variants.get(key)
            row = (_our_row(run, key, VARIANT_TITLES[key], categories, n_resamples, seed) if run
                   else Row(key=key, label=VARIANT_TITLES[key]))
            _add_paper(row, paper, block.paper_model, key, categories)
            block.rows.append(row)
            full = next((r for r in block.rows if r.key == "full"), None)
            if key != "full" and full is not None:
                block.rows.append(_drop(full, row, table, paper, block.paper_model))
        if "full" in variants:
            for key in VARIANT_TITLES:
                if key != "full" and key in variants:
                    block.paired.extend(paired_rows(variants["full"], variants[key], "full", key, categories,
                                                    n_resamples, seed))
        table.blocks.append(block)
    return table
