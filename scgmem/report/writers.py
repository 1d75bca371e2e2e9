"""Writers of the report's tables (`scgmem.report.tables.Table`): Markdown, tidy CSV, LaTeX.

Each row prints two lines, "ours" (value and bootstrap CI) and "paper" (the paper's value,
its flag mark from `scgmem.report.paper.FLAG_MARKS`, and ours − paper).
"""
from __future__ import annotations

import csv
from pathlib import Path

from scgmem.report.output import open_output, write_output
from scgmem.harness.paper_settings import MARKS, marks
from scgmem.report.paper import CATEGORY_TITLES, FLAG_MARKS, JUDGE, METRIC_TITLES, column
from scgmem.report.tables import Cell, Table


def _fmt(v: float | None, unit: str = "", signed: bool = False) -> str:
    if v is None:
        return "–"
    if unit == "%":
        return f"{v:+.1f}%"
    return f"{v:+.2f}" if signed else f"{v:.2f}"


def _ours_text(cell: Cell, latex: bool = False) -> str:
    text = _fmt(cell.ours, cell.unit)
    if cell.ci is not None and cell.ours is not None:
        ci = f"[{cell.ci[0]:.2f}, {cell.ci[1]:.2f}]"
        text += f" {{\\scriptsize {ci}}}" if latex else f" {ci}"
    return text


def _paper_text(cell: Cell, latex: bool = False) -> str:
    if cell.paper is None:
        return "–"
    mark = FLAG_MARKS[cell.paper_flag]
    if latex and mark:
        mark = {"†": "$^\\dagger$", "‡": "$^\\ddagger$", "§": "\\S{}"}[mark]
    text = _fmt(cell.paper, cell.unit) + mark
    if cell.unit != "%" and cell.diff is not None:
        delta = "$\\Delta$" if latex else "Δ"
        text += f" ({delta} {_fmt(cell.diff, signed=True)})"
    return text


def _settings_text(row) -> str:
    """The Settings column: marks of the run's departures from the paper's settings (spelled out
    in the CSV); empty for a row without a run."""
    if row.run_dir is None:
        return ""
    return marks(row.deviations) or "paper"


def _columns(table: Table) -> list[tuple[str, str]]:
    return [(cat, metric) for cat in table.column_groups for metric in table.metrics]


def _legend(table: Table) -> list[str]:
    return ["Cells: ours [bootstrap 95% CI over questions]; next line: the paper's value (Δ = ours − paper). "
            "Improvement: SCG-Mem relative to the strongest baseline of the column, as the paper computes it; "
            "Performance Drop: the ablation relative to the full model.",
            "Average: the paper's Average, the unweighted mean of the category means. Overall (weighted): "
            "LoCoMo's Overall, the mean over all scored questions (each category weighted by its question "
            "count); the paper prints none.",
            "† the paper prints no average for this row: the unweighted mean of its category values. "
            "‡ from a secondary summary of the SCG-Mem paper, not the paper itself. "
            "§ printed by the paper, but its own rows give another value (results/paper/README.md).",
            "Settings: the run's departures from the paper's settings (float32, BGE-M3, BLEU-1 with nltk "
            f"punkt): {MARKS['dtype']} = another dtype, {MARKS['embedder']} = another embedder, "
            f"{MARKS['bleu']} = BLEU-1 tokeniser fallback (punkt missing -> treebank), {MARKS['speed']} = "
            "batch settings changed on a resume in half precision; paper = the paper's settings.",
            *([f"J: the LLM judge's accuracy, the share of CORRECT labels averaged over its runs "
               "(scgmem-report judge; docs/scoring.md, \"LLM judge (J)\"); the paper reports none."]
              if JUDGE in table.metrics else []),
            CAT5_LEGEND, *(md_line(note) for note in table.notes)]  # notes name runs, models, paths


def to_markdown(table: Table) -> str:
    cols = _columns(table)
    head = ["Method", "", *(f"{CATEGORY_TITLES.get(c, c)} {METRIC_TITLES[m]}" for c, m in cols), "n", "Settings"]
    lines = [f"## {md_line(table.title)}", ""]
    for block in table.blocks:
        paper = block.paper_model or "none"
        same = " (the paper did not run this model)" if block.paper_model not in (None, block.model) else ""
        lines += [f"### {md_text(block.model)} — paper numbers: {md_text(paper)}{same}", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(cols) + 1) + "---|"]
        for row in block.rows:
            cells = [row.cells.get(column(c, m), Cell()) for c, m in cols]
            lines.append("| " + " | ".join([md_text(row.label), "ours", *(_ours_text(x) for x in cells),
                                            "" if row.n is None else str(row.n), _settings_text(row)]) + " |")
            lines.append("| " + " | ".join(["", "paper", *(_paper_text(x) for x in cells), "", ""]) + " |")
        if block.paired:
            lines += ["", f"Paired bootstrap ({md_line(block.model)}): a − b in percent points over the questions both "
                      "runs answered; p: two-sided (twice the smaller tail of the resampled a − b), not corrected "
                      "for the columns tested.", "",
                      "| Category | Metric | a | b | n | a − b | 95% CI | p (two-sided) |", "|---|---|---|---|---:|---:|---:|---:|"]
            for p in block.paired:
                ci = "–" if p["ci_low"] is None else f"[{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]"
                pv = "–" if p["p_value"] is None else f"{p['p_value']:.3f}"
                lines.append(f"| {CATEGORY_TITLES.get(p['category'], p['category'])} | {METRIC_TITLES[p['metric']]} "
                             f"| {md_text(p['a'])} | {md_text(p['b'])} | {p['n']} | {_fmt(p['diff'], signed=True)} | {ci} | {pv} |")
        lines += _cat5_markdown(block)
        lines.append("")
    lines += [f"- {note}" for note in _legend(table)]
    return "\n".join(lines) + "\n"


CAT5_RATES = ("refusal_rate", "trap_exact_rate", "both_options_rate", "trap_repeat_rate", "refusal_only_rate")
CAT5_FIELDS = ("table", "model", "row", "label", "n", "average_1_4_f1", "average_1_4_f1_ci_low",
               "average_1_4_f1_ci_high", "average_1_4_bleu1", "overall_weighted_1_4_f1", "categories_1_4",
               "cat5_n", *CAT5_RATES, "f1_share_trap_exact", "f1_share_both_options", "run_dir")
CAT5_LEGEND = ("Average 1-4: the paper's Average over the scored categories 1-4 only [bootstrap 95% CI], so "
               "category 5's trap questions do not move it. Category 5 (shares of its answers): refusal = says "
               "the information is not in the conversation (LoCoMo's rule: contains 'not mentioned' or 'no "
               "information available'; higher is better); trap = exactly the trap answer; both = repeats both "
               "options; trap repeat = contains the trap answer's words (lower is better); F1 from trap / both: "
               "share of category 5's F1 those answers supply (docs/scoring.md, \"Category 5\").")


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100.0 * v:.1f}%"


def cat5_records(table: Table) -> list[dict]:
    """One row per run of the table: category 5 apart (`scgmem.report.tables.category5_apart`)."""
    out = []
    for block in table.blocks:
        for row in block.rows:
            if not row.cat5:
                continue
            avg, c5 = row.cat5["average_1_4"] or {}, row.cat5["category5"] or {}
            ci = row.cat5["average_1_4_ci"].get("f1") or (None, None)
            share = c5.get("f1_share") or {}
            out.append({"table": table.name, "model": block.model, "row": row.key, "label": row.label, "n": row.n,
                        "average_1_4_f1": avg.get("f1"), "average_1_4_f1_ci_low": ci[0],
                        "average_1_4_f1_ci_high": ci[1], "average_1_4_bleu1": avg.get("bleu1"),
                        "overall_weighted_1_4_f1": (avg.get("overall_weighted") or {}).get("f1"),
                        "categories_1_4": " ".join(str(c) for c in avg.get("categories", [])),
                        "cat5_n": c5.get("n"), **{k: c5.get(k) for k in CAT5_RATES},
                        "f1_share_trap_exact": share.get("trap_exact"),
                        "f1_share_both_options": share.get("both_options"), "run_dir": row.run_dir})
    return out


def _cat5_markdown(block) -> list[str]:
    table = Table(name="", title="", categories=[], blocks=[block])
    rows = cat5_records(table)
    if not rows:
        return []
    lines = ["", f"Category 5 apart ({md_line(block.model)}); see the legend below.", "",
             "| Method | Average 1-4 F1 / BLEU-1 | Cat. 5 n | refusal | trap | both | trap repeat | "
             "F1 from trap / both |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ci = "" if r["average_1_4_f1_ci_low"] is None else \
            f" [{r['average_1_4_f1_ci_low']:.2f}, {r['average_1_4_f1_ci_high']:.2f}]"
        lines.append(f"| {md_text(r['label'])} | {_fmt(r['average_1_4_f1'])}{ci} / {_fmt(r['average_1_4_bleu1'])} "
                     f"| {'–' if r['cat5_n'] is None else r['cat5_n']} | {_pct(r['refusal_rate'])} "
                     f"| {_pct(r['trap_exact_rate'])} | {_pct(r['both_options_rate'])} "
                     f"| {_pct(r['trap_repeat_rate'])} | {_pct(r['f1_share_trap_exact'])} / "
                     f"{_pct(r['f1_share_both_options'])} |")
    return lines


CSV_FIELDS = ("table", "model", "paper_model", "row", "label", "category", "metric", "unit", "ours", "ci_low",
              "ci_high", "paper", "paper_flag", "diff", "n", "run_dir", "settings_flags")
PAIRED_FIELDS = ("table", "model", "category", "metric", "a", "b", "n", "unmatched", "diff", "ci_low", "ci_high",
                 "p_value")


def to_records(table: Table) -> tuple[list[dict], list[dict]]:
    """Tidy rows (one per cell) and the paired-bootstrap rows, for CSV and wandb."""
    cells, paired = [], []
    for block in table.blocks:
        for row in block.rows:
            for (cat, metric) in _columns(table):
                c = row.cells.get(column(cat, metric), Cell())
                cells.append({"table": table.name, "model": block.model, "paper_model": block.paper_model,
                              "row": row.key, "label": row.label, "category": cat, "metric": metric,
                              "unit": c.unit or "points", "ours": c.ours, "ci_low": c.ci[0] if c.ci else None,
                              "ci_high": c.ci[1] if c.ci else None, "paper": c.paper, "paper_flag": c.paper_flag,
                              "diff": c.diff, "n": row.n, "run_dir": row.run_dir,
                              "settings_flags": "; ".join(row.deviations)})
        paired += [{"table": table.name, "model": block.model, **{k: p[k] for k in PAIRED_FIELDS[2:]}}
                   for p in block.paired]
    return cells, paired


_LATEX_SPECIAL = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "$": "\\$", "#": "\\#", "_": "\\_",
                  "{": "\\{", "}": "\\}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    """Text (labels, model names: anything a config or a model wrote) as literal LaTeX, on one line."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in " ".join(str(text).split()))


def md_text(text) -> str:
    """Text as one literal Markdown table cell: a '|' would end the cell, a newline the row, and
    '<' could open HTML; labels and notes may come from configs, data or model outputs."""
    flat = " ".join(str(text).split())
    return flat.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def md_line(text) -> str:
    """Text as part of one Markdown line (a heading, a note): newlines would start a new block (a
    model name "x\n## y" would inject a heading), '<' could open HTML."""
    return " ".join(str(text).split()).replace("<", "&lt;").replace(">", "&gt;")


# A spreadsheet reads a cell starting with one of these as a formula (CSV injection): such text
# cells get a leading apostrophe, which spreadsheets show as text. Numbers are written as they are.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """`value` as a CSV cell that no spreadsheet evaluates (see FORMULA_STARTS)."""
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_csv(path: Path, rows: list[dict], fields) -> None:
    """Rows as CSV with a header, every text cell through `csv_cell`."""
    with open_output(path) as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)


def to_latex(table: Table) -> str:
    """One booktabs tabular per model: an "ours" line (value and CI) and a "paper" line per row."""
    cols = _columns(table)
    groups, w = table.column_groups, len(table.metrics)
    out = [f"% {table.title}. Generated by scgmem-report; needs \\usepackage{{booktabs}}."]
    for block in table.blocks:
        out += ["\\begin{table}[t]", "\\centering", "\\scriptsize",
                f"\\caption{{{_latex_escape(table.title)}: {_latex_escape(block.model)} "
                f"(paper numbers: {_latex_escape(block.paper_model or 'none')}).}}",
                "\\begin{tabular}{ll" + "r" * w * len(groups) + "}", "\\toprule",
                " & & " + " & ".join(f"\\multicolumn{{{w}}}{{c}}{{{CATEGORY_TITLES.get(g, g)}}}" for g in groups) + " \\\\",
                " ".join(f"\\cmidrule(lr){{{3 + w * i}-{2 + w * (i + 1)}}}" for i in range(len(groups))),
                "Method & & " + " & ".join(METRIC_TITLES[m] for _, m in cols) + " \\\\", "\\midrule"]
        for row in block.rows:
            cells = [row.cells.get(column(c, m), Cell()) for c, m in cols]
            ours = [_ours_text(x, latex=True).replace("%", "\\%") for x in cells]
            out.append(f"{_latex_escape(row.label)} & ours & " + " & ".join(ours) + " \\\\")
            out.append(" & paper & " + " & ".join(_paper_text(x, latex=True).replace("%", "\\%") for x in cells)
                       + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(out)


def write_table(table: Table, out_dir: str | Path) -> list[Path]:
    """Write <name>.md, <name>.csv, <name>_paired.csv, <name>.tex and <name>_cat5.csv (category 5 apart)
    into `out_dir`; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cells, paired = to_records(table)
    paths = [out_dir / f"{table.name}.md", out_dir / f"{table.name}.csv", out_dir / f"{table.name}_paired.csv",
             out_dir / f"{table.name}.tex", out_dir / f"{table.name}_cat5.csv"]
    write_output(paths[0], to_markdown(table))
    for path, rows, fields in ((paths[1], cells, CSV_FIELDS), (paths[2], paired, PAIRED_FIELDS),
                               (paths[4], cat5_records(table), CAT5_FIELDS)):
        write_csv(path, rows, fields)
    write_output(paths[3], to_latex(table))
    return paths
