"""One row per run: scores, evidence recall and what the run cost (the baselines' comparison table).

    scgmem-report costs --runs results/runs/multirun/<time> [--runs another/dir]

Per category: F1 / BLEU-1 / evidence recall. Costs: ingest seconds (counted whether the memory
was built in this run or loaded from the cache: `timing.ingest_s`), answering seconds per
question (recall + answer), LLM calls and tokens (prompt + generated) per ingested turn and per
question, and the fallbacks each method counted (`deviations`). Ingested turns are the runner's
own count (summary.json `data.ingested_turns`), so a run and its table cannot disagree on them.

Per question, the recall and answer counts are divided only by the records they cover
(`question_costs`): summary.json's `tokens_questions` where it has one (a resumed run counts the
records of every attempt that logged its usage); for an older summary without it, all records
when the records' own answer `prompt_tokens` add up to the summary's answer prompt tokens (the
counts then saw every answer), else the counts are not used: tokens per question are the records'
own answer prompt tokens (a lower bound: recall calls and generated tokens are not in them), and
calls per question are unknown.
"""
from __future__ import annotations

import csv
from pathlib import Path

from scgmem.report.output import open_output, write_output
from scgmem.report.collect import SUMMARY, Run, caveats
from scgmem.report.paper import run_title
from scgmem.report.writers import csv_cell, md_line, md_text
from scgmem.scoring.metric_table import cost_metrics, table_metrics

QUESTION_PHASES = ("recall", "answer")


def ingested_turns(run: Run) -> int:
    """Turns ingested over the run's conversations, from summary.json `data.ingested_turns`."""
    data = run.summary.get("data") or {}
    per_conversation = data.get("ingested_turns")
    where = run.run_dir / SUMMARY
    if not isinstance(per_conversation, dict):
        raise ValueError(f"{where}: no field data.ingested_turns (turns per conversation); "
                         "rerun it with the current scgmem-run to get its costs")
    missing = [s for s in data.get("samples") or [] if s not in per_conversation]
    if missing:
        raise ValueError(f"{where}: field data.ingested_turns has no count for sample(s) {missing}")
    return sum(int(per_conversation[s]) for s in data.get("samples") or per_conversation)


def _phase(tokens: dict, phases) -> tuple[int, int]:
    calls = sum(tokens.get(p, {}).get("calls", 0) for p in phases)
    toks = sum(tokens.get(p, {}).get("prompt_tokens", 0) + tokens.get(p, {}).get("generated_tokens", 0)
               for p in phases)
    return calls, toks


# How `question_costs` got its numbers (the `tokens_basis` column).
COUNTS, RECORDS, UNKNOWN = "counts", "answer prompts of the records", "unknown"


def question_costs(run: Run) -> dict:
    """LLM calls and tokens (prompt + generated, recall + answer) per question, over the records
    the summary's counts cover (module docstring).

    Returns {"calls_per_question", "tokens_per_question", "covered", "tokens_basis"}: basis
    COUNTS (the summary's counts over `covered` records), RECORDS (tokens per question from the
    records' own answer `prompt_tokens`, a lower bound; calls None) or UNKNOWN (both None).
    """
    s = run.summary
    n = int(s["n_questions"])
    tokens = s.get("tokens") or {}
    calls, toks = _phase(tokens, QUESTION_PHASES)
    covered = s.get("tokens_questions")
    own = [r.get("prompt_tokens") for r in run.records]
    own = [int(t) for t in own if t is not None] if all(t is not None for t in own) else None
    if covered is None:  # written before the runner counted the records its counts cover
        answer_prompts = int((tokens.get("answer") or {}).get("prompt_tokens", 0))
        covered = n if own is not None and sum(own) == answer_prompts else 0
    if covered:
        return {"calls_per_question": calls / covered, "tokens_per_question": toks / covered, "covered": int(covered),
                "tokens_basis": COUNTS}
    if own:
        return {"calls_per_question": None, "tokens_per_question": sum(own) / len(own), "covered": 0,
                "tokens_basis": RECORDS}
    return {"calls_per_question": None, "tokens_per_question": None, "covered": 0, "tokens_basis": UNKNOWN}


def cost_row(run: Run) -> dict:
    s = run.summary
    turns = ingested_turns(run)
    n = s["n_questions"]
    tokens = s.get("tokens") or {}
    ingest_calls, ingest_tokens = _phase(tokens, ("ingest",))
    per_question = question_costs(run)
    row = {"model": run.model, "method": run.method, "label": run_title(run.method, run.setting), "n": n,
           "turns": turns}
    for cat in run.categories:
        c = s["categories"].get(cat) or {}
        row[cat] = (*(c.get(m.name) for m in cost_metrics()), c.get("n"))
    timing = s.get("timing") or {}
    row.update({
        **{f"average_{name}": s["average"].get(name) for name in table_metrics()},
        "ingest_s": timing.get("ingest_s"), "answer_s_per_question": timing.get("answer_s_per_question"),
        "ingest_calls_per_turn": ingest_calls / turns if turns else None,
        "ingest_tokens_per_turn": ingest_tokens / turns if turns else None,
        **per_question,
        "deviations": s.get("deviations") or {},
    })
    return row


def _f(x, digits=2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _order(run: Run) -> tuple:
    """Rows by model, method, then an SCG-Mem run's settings: both mechanisms on first, by k, then hops."""
    if run.method != "scgmem":
        return run.model, run.method, ()
    return run.model, run.method, (not run.setting("constraint", True), not run.setting("evolution", True),
                                   int(run.setting("k", 0)), int(run.setting("hops", 0)))


def _question_cells(r: dict) -> tuple[str, str]:
    """calls/q and tok/q as printed: a lower bound and unknowns said in words, a partial cover named."""
    if r["tokens_basis"] == COUNTS:
        cover = "" if r["covered"] == r["n"] else f" ({r['covered']} of {r['n']} answers)"
        return _f(r["calls_per_question"]), _f(r["tokens_per_question"], 0) + cover
    if r["tokens_basis"] == RECORDS:
        return "unknown", f"≥ {r['tokens_per_question']:.0f} (answer prompts only)"
    return "unknown", "unknown"


NOTE = ("F1 / BLEU-1 in percent; ER = evidence recall (0-1). Ingest s counts memory loaded from the cache at the "
        "cost it was built with. calls/q and tok/q: recall and answer LLM calls and tokens (prompt + generated) per "
        "question, over the answers whose usage the summary counted (\"k of n answers\" where that is fewer than all); "
        "\"≥ x (answer prompts only)\": the summary's counts do not cover the records (a resume before usage was "
        "logged), so tokens are the records' own answer prompt tokens, a lower bound (recall calls and generated "
        "tokens are not in them), and calls are unknown.")


def write_costs(runs: list[Run], out_dir: Path) -> list[Path]:
    rows = [cost_row(r) for r in sorted(runs, key=_order)]
    cats = runs[0].categories
    out_dir.mkdir(parents=True, exist_ok=True)
    per_cat, averaged = cost_metrics(), table_metrics()
    short = {m.name: m.short for m in per_cat}
    head = ["model", "run", "n", *[f"{c} " + " / ".join(m.short for m in per_cat) for c in cats],
            "avg " + " / ".join(short[name] for name in averaged),
            "ingest s", "answer s/q", "ingest calls/turn", "ingest tok/turn", "calls/q", "tok/q", "deviations"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["label"], str(r["n"])]
        cells += [" / ".join(_f(v) for v in r[c][:len(per_cat)]) if r.get(c) else "–" for c in cats]
        cells += [" / ".join(_f(r[f"average_{name}"]) for name in averaged), _f(r["ingest_s"], 0),
                  _f(r["answer_s_per_question"], 1), _f(r["ingest_calls_per_turn"]), _f(r["ingest_tokens_per_turn"], 0),
                  *_question_cells(r), ", ".join(f"{k} {v}" for k, v in sorted(r["deviations"].items())) or "none"]
        lines.append("| " + " | ".join(md_text(c) for c in cells) + " |")
    md = out_dir / "costs.md"
    notes = "".join(f"\n\n{md_line(c)}" for c in caveats(runs))  # partial merges, unchecked references
    write_output(md, "\n".join(lines) + f"\n\n{NOTE}{notes}\n")
    path_csv = out_dir / "costs.csv"
    with open_output(path_csv) as f:
        w = csv.writer(f)
        w.writerow(["model", "method", "label", "n", "turns", *[f"{c}_{m.name}" for c in cats for m in per_cat],
                    *[f"average_{name}" for name in averaged], "ingest_s", "answer_s_per_question", "ingest_calls_per_turn",
                    "ingest_tokens_per_turn", "calls_per_question", "tokens_per_question", "tokens_basis",
                    "tokens_covered", "deviations"])
        for r in rows:
            w.writerow(csv_cell(c) for c in [r["model"], r["method"], r["label"], r["n"], r["turns"],  # text: escaped
                        *[(r[c][i] if r.get(c) else "") for c in cats for i in range(len(per_cat))],
                        *[r[f"average_{name}"] for name in averaged], r["ingest_s"], r["answer_s_per_question"],
                        r["ingest_calls_per_turn"], r["ingest_tokens_per_turn"], r["calls_per_question"],
                        r["tokens_per_question"], r["tokens_basis"], r["covered"],
                        ";".join(f"{k}={v}" for k, v in sorted(r["deviations"].items()))])
    return [md, path_csv]
