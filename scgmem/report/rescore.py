"""`scgmem-report rescore RUN_DIR --gold original --gold audited`: a finished run's answers scored
again under another gold (`data.gold`, docs/scoring.md "Audited gold answers"), without rerunning it.

Each stored prediction (`predictions.jsonl`'s `prediction`, read as the run read it) is scored by
the run's own protocol (from summary.json's config; BERTScore left out) against the reference of
the chosen gold, and its evidence recall is recomputed against that gold's evidence from the
run's `retrieved` turns. Written into OUT (default: the run directory), none named summary.json
so the report never takes them for runs:

- `rescored_<gold>.json`: per-category and average scores, the 1-4 average and category-5 numbers
  (scgmem/scoring/cat5.py), bootstrap CIs, the answers and evidence replaced per category, and
  `records_changed`: questions whose F1 or BLEU-1 differs from the run's stored one (0 under the
  gold the run was scored with: the check that rescoring reproduces the run);
- `rescored_<gold>.jsonl`: per question (sample_id, qa_index, category, reference, f1, bleu1,
  evidence_recall);
- `gold_comparison.md` / `.csv`: one row per gold.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from scgmem.report.output import open_output, write_output
from scgmem.harness.checked_run import data_of, protocol_of
from scgmem.harness.untrusted import StoredFileError
from scgmem.report.collect import Run, shown_path
from scgmem.report.paired import N_RESAMPLES
from scgmem.report.paper import CATEGORY_TITLES
from scgmem.report.writers import csv_cell
from scgmem.scoring.cat5 import summary_fields
from scgmem.scoring.metric_table import answer_metrics, record_metrics, table_metrics
from scgmem.scoring.metrics import aggregate, average_ci, category_cis, evidence_recall

PER_QUESTION = ("sample_id", "qa_index", "category", "reference", *record_metrics())


def _source_and_protocol(run: Run, gold: str, data_path: str | None):
    """The run's data slice under `gold` and its protocol, built from the stored config as plain values
    (`checked_run`: no interpolation resolved, only the project's protocol classes; chat and judge
    are not the protocol's, which made `rescore` fail on every run that had `protocol.judge`)."""
    where = run.run_dir / "summary.json"
    config = run.config
    # Every answered question is rescored: a session slice is not applied again (under another gold
    # its evidence could drop a question the run answered).
    source = data_of({**config, "data": {**(config.get("data") or {}), "max_sessions": None}}, where, data_path, gold)
    if source is None:
        raise StoredFileError(where, "config.data.path", (config.get("data") or {}).get("path"),
                              "the run's data file is not here; pass it with --data")
    return source, protocol_of(config, source.scored, where)


def rescore_run(run: Run, gold: str, data_path: str | None = None, n_resamples: int = N_RESAMPLES,
                seed: int = 0) -> tuple[dict, list[dict]]:
    """(the rescored summary, the rescored records with `prediction` and `options` kept)."""
    source, protocol = _source_and_protocol(run, gold, data_path)
    conversations, _ = source.load()
    questions = {(q.sample_id, q.index): q for c in conversations for q in c.qa}
    records = []
    for r in run.records:
        q = questions.get((r["sample_id"], r["qa_index"]))
        if q is None or q.question != r["question"]:
            raise ValueError(f"{run.run_dir}/predictions.jsonl: {r['sample_id']} qa {r['qa_index']}: not in "
                             f"{source.path} (or its question differs); rescore with the run's data file (--data)")
        scores = protocol.score(q, r["prediction"], options=r.get("options"))
        records.append({"sample_id": q.sample_id, "qa_index": q.index, "category": q.category,
                        "reference": protocol.reference(q), **scores,
                        "evidence_recall": evidence_recall(q.evidence, r.get("retrieved", [])),
                        "prediction": r["prediction"], "options": r.get("options")})
    categories = run.category_mapping
    changed = sum(1 for new, old in zip(records, run.records)
                  if any(abs(new[m.name] - float(old[m.name])) > 1e-12 for m in answer_metrics()))
    cis = category_cis(records, categories, n_resamples=n_resamples, seed=seed)
    summary = {
        "run_dir": shown_path(run.run_dir), "gold": gold, "protocol": protocol.name,
        "n_questions": len(records), **aggregate(records, categories),
        **summary_fields(records, categories, protocol.name),
        "ci": {"categories": cis, "average": {m: average_ci(records, categories, m, n_resamples, seed)
                                              for m in table_metrics()},
               "average_1_4": {m: average_ci(records, {c: n for c, n in categories.items() if c != 5}, m,
                                             n_resamples, seed) for m in table_metrics()}},
        "replaced": source.replaced_among({(r["sample_id"], r["qa_index"]) for r in records}),
        "records_changed": changed,
        "note": f"the run's stored predictions scored again under data.gold={gold}; BERTScore not rescored",
    }
    return summary, records


def _f(v, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def comparison_rows(summaries: list[dict]) -> list[dict]:
    """One flat row per gold (the CSV)."""
    rows = []
    for s in summaries:
        row = {"gold": s["gold"], "n": s["n_questions"], "records_changed": s["records_changed"]}
        for name, c in s["categories"].items():
            row.update({f"{name}_f1": c["f1"], f"{name}_bleu1": c["bleu1"], f"{name}_evidence_recall": c["evidence_recall"],
                        f"{name}_f1_ci": s["ci"]["categories"][name]["f1"]})
        avg14 = s["average_1_4"] or {}
        row.update({"average_f1": s["average"]["f1"], "average_bleu1": s["average"]["bleu1"],
                    "average_f1_ci": s["ci"]["average"]["f1"], "average_1_4_f1": avg14.get("f1"),
                    "average_1_4_bleu1": avg14.get("bleu1"), "overall_weighted_f1": s["overall_weighted"]["f1"],
                    "answers_replaced": sum(v["answers"] for v in s["replaced"].values()),
                    "evidence_replaced": sum(v["evidence"] for v in s["replaced"].values())})
        rows.append(row)
    return rows


def comparison_markdown(summaries: list[dict], command: str) -> str:
    names = list(summaries[0]["categories"])
    head = ["gold", *(f"{CATEGORY_TITLES.get(n, n)} F1 [CI] / B1" for n in names), "Average F1 [CI] / B1",
            "Average 1-4 F1 [CI] / B1", "Overall F1", "answers / evidence replaced", "F1 or B1 changed"]
    lines = [f"## {summaries[0]['run_dir']}: scores under each gold", "", f"    {command}", "",
             "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for s in summaries:
        cells = []
        for n in names:
            c, ci = s["categories"][n], s["ci"]["categories"][n]["f1"]
            cells.append(f"{_f(c['f1'])} [{_f(ci[0])}, {_f(ci[1])}] / {_f(c['bleu1'])}" if ci else "–")
        ci = s["ci"]["average"]["f1"]
        avg14 = s["average_1_4"] or {}
        replaced = "; ".join(f"cat {k}: {v['answers']} / {v['evidence']}" for k, v in s["replaced"].items()) or "none"
        ci14 = s["ci"]["average_1_4"]["f1"] or (None, None)
        cells += [f"{_f(s['average']['f1'])} [{_f(ci[0])}, {_f(ci[1])}] / {_f(s['average']['bleu1'])}",
                  f"{_f(avg14.get('f1'))} [{_f(ci14[0])}, {_f(ci14[1])}] / {_f(avg14.get('bleu1'))}", _f(s["overall_weighted"]["f1"]), replaced,
                  f"{s['records_changed']} of {s['n_questions']}"]
        lines.append(f"| {s['gold']} | " + " | ".join(cells) + " |")
    lines += ["", "Evidence recall (0..1) per category: " + "; ".join(
        f"{s['gold']}: " + ", ".join(f"{CATEGORY_TITLES.get(n, n)} {_f(s['categories'][n]['evidence_recall'], 3)}"
                                     for n in names) for s in summaries), "",
              "F1 / BLEU-1 in percent under the run's protocol; CIs: bootstrap 95% over questions. 'answers / "
              "evidence replaced': per category, the gold answers and evidence lists the audit corrected among "
              "the run's questions. 'F1 or B1 changed': questions whose score differs from the one the run "
              "stored (0 for the gold it was run with). docs/scoring.md, \"Audited gold answers\"."]
    return "\n".join(lines) + "\n"


def write_rescored(run: Run, golds: list[str], out: Path, command: str, data_path: str | None = None,
                   n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths, summaries = [], []
    for gold in golds:
        summary, records = rescore_run(run, gold, data_path, n_resamples, seed)
        summary["command"] = command
        summaries.append(summary)
        paths += [out / f"rescored_{gold}.json", out / f"rescored_{gold}.jsonl"]
        write_output(paths[-2], json.dumps(summary, indent=1) + "\n")
        write_output(paths[-1], "".join(json.dumps({k: r[k] for k in PER_QUESTION}) + "\n" for r in records))
    rows = comparison_rows(summaries)
    paths += [out / "gold_comparison.md", out / "gold_comparison.csv"]
    write_output(paths[-2], comparison_markdown(summaries, command))
    with open_output(paths[-1]) as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)
    return paths
