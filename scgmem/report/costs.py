"""One row per run: scores, evidence recall and what the run cost (the baselines' comparison table).

    scgmem-report costs --runs results/runs/multirun/<time> [--runs another/dir]

Per category: F1 / BLEU-1 / evidence recall. Costs: ingest seconds (counted whether the memory
was built in this run or loaded from the cache: `timing.ingest_s`), answering seconds per
question (recall + answer), LLM calls and tokens (prompt + generated) per ingested turn and per
question, and the fallbacks each method counted (`deviations`). Ingested turns are the runner's
own count (summary.json `data.ingested_turns`), so a run and its table cannot disagree on them.
"""
from __future__ import annotations

import csv
from pathlib import Path

from scgmem.report.collect import SUMMARY, Run
from scgmem.report.writers import md_text
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


def cost_row(run: Run) -> dict:
    s = run.summary
    turns = ingested_turns(run)
    n = s["n_questions"]
    covered = s.get("tokens_questions", n)
    tokens = s.get("tokens") or {}
    ingest_calls, ingest_tokens = _phase(tokens, ("ingest",))
    q_calls, q_tokens = _phase(tokens, QUESTION_PHASES)
    row = {"model": run.model, "method": run.method, "n": n, "turns": turns}
    for cat in run.categories:
        c = s["categories"].get(cat) or {}
        row[cat] = (*(c.get(m.name) for m in cost_metrics()), c.get("n"))
    timing = s.get("timing") or {}
    row.update({
        **{f"average_{name}": s["average"].get(name) for name in table_metrics()},
        "ingest_s": timing.get("ingest_s"), "answer_s_per_question": timing.get("answer_s_per_question"),
        "ingest_calls_per_turn": ingest_calls / turns if turns else None,
        "ingest_tokens_per_turn": ingest_tokens / turns if turns else None,
        # over the records the counts cover (a run resumed before usage.jsonl existed counts fewer than n)
        "calls_per_question": q_calls / covered if covered else None,
        "tokens_per_question": q_tokens / covered if covered else None,
        "deviations": s.get("deviations") or {},
    })
    return row


def _f(x, digits=2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def write_costs(runs: list[Run], out_dir: Path) -> list[Path]:
    rows = sorted((cost_row(r) for r in runs), key=lambda r: (r["model"], r["method"]))
    cats = runs[0].categories
    out_dir.mkdir(parents=True, exist_ok=True)
    per_cat, averaged = cost_metrics(), table_metrics()
    short = {m.name: m.short for m in per_cat}
    head = ["model", "method", "n", *[f"{c} " + " / ".join(m.short for m in per_cat) for c in cats],
            "avg " + " / ".join(short[name] for name in averaged),
            "ingest s", "answer s/q", "ingest calls/turn", "ingest tok/turn", "calls/q", "tok/q", "deviations"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["method"], str(r["n"])]
        cells += [" / ".join(_f(v) for v in r[c][:len(per_cat)]) if r.get(c) else "–" for c in cats]
        cells += [" / ".join(_f(r[f"average_{name}"]) for name in averaged), _f(r["ingest_s"], 0),
                  _f(r["answer_s_per_question"], 1), _f(r["ingest_calls_per_turn"]), _f(r["ingest_tokens_per_turn"], 0),
                  _f(r["calls_per_question"]), _f(r["tokens_per_question"], 0),
                  ", ".join(f"{k} {v}" for k, v in sorted(r["deviations"].items())) or "none"]
        lines.append("| " + " | ".join(md_text(c) for c in cells) + " |")
    md = out_dir / "costs.md"
    md.write_text("\n".join(lines) + "\n\nF1 / BLEU-1 in percent; ER = evidence recall (0-1). Ingest s counts "
                  "memory loaded from the cache at the cost it was built with.\n", encoding="utf-8")
    path_csv = out_dir / "costs.csv"
    with open(path_csv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["model", "method", "n", "turns", *[f"{c}_{m.name}" for c in cats for m in per_cat],
                    *[f"average_{name}" for name in averaged], "ingest_s", "answer_s_per_question", "ingest_calls_per_turn",
                    "ingest_tokens_per_turn", "calls_per_question", "tokens_per_question", "deviations"])
        for r in rows:
            w.writerow([r["model"], r["method"], r["n"], r["turns"],
                        *[(r[c][i] if r.get(c) else "") for c in cats for i in range(len(per_cat))],
                        *[r[f"average_{name}"] for name in averaged], r["ingest_s"], r["answer_s_per_question"],
                        r["ingest_calls_per_turn"], r["ingest_tokens_per_turn"], r["calls_per_question"],
                        r["tokens_per_question"], ";".join(f"{k}={v}" for k, v in sorted(r["deviations"].items()))])
    return [md, path_csv]
