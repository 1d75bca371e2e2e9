"""One Markdown row per run: the setting, n, average F1 / BLEU-1 with the bootstrap 95% CI of
the paper's Average (`scgmem.report.tables.average_ci`), F1 per category, evidence recall, and
the mean context handed to the answer prompt (tokens, turns) from summary.json.

    .venv/bin/python -m experiments.recall_k_conv26.points <run dir>...
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from scgmem.report.tables import average_ci

CATEGORIES = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}


def row(run: Path) -> str:
    summary = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    method = summary["config"]["method"]
    setting = (f"k={method['k']} hops={method['hops']} constraint={method['constraint']} "
               f"evolution={method['evolution']} turns_per_concept={method.get('turns_per_concept')}")
    f1_ci = average_ci(records, CATEGORIES, "f1")
    b1_ci = average_ci(records, CATEGORIES, "bleu1")
    cats = " / ".join(f"{summary['categories'][c]['f1']:.1f}" for c in CATEGORIES.values())
    er = [r["evidence_recall"] for r in records if r.get("evidence_recall") is not None]
    ctx = summary.get("context") or {}
    return (f"| {run.name} | {setting} | {summary['n_questions']} | {summary['average']['f1']:.2f} "
            f"[{f1_ci[0]:.1f}, {f1_ci[1]:.1f}] | {summary['average']['bleu1']:.2f} [{b1_ci[0]:.1f}, {b1_ci[1]:.1f}] "
            f"| {cats} | {sum(er) / len(er):.2f} | {ctx.get('mean_tokens')} | {ctx.get('mean_turns')} |")


def main(runs: list[str]) -> None:
    print("| run | setting | n | avg F1 [95% CI] | avg BLEU-1 [95% CI] | F1 multi-hop / temporal / single-hop / "
          "adversarial | evidence recall | context tokens | context turns |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        if (Path(run) / "summary.json").is_file():
            print(row(Path(run)))


if __name__ == "__main__":
    main(sys.argv[1:])
