"""A judge model's agreement with the hand-labelled (question, gold, prediction) triples.

    .venv/bin/python -m experiments.judge_agreement tests/fixtures/judge_labelled.jsonl \
        [--model smollm2-135m] [--runs 3] [--json results/embedded/judge/agreement_smollm2-135m.json]

Each fixture line holds a triple taken from a committed run (`source`, `sample_id`, `qa_index`), its
hand label (CORRECT/WRONG), the kind of case (paraphrase, overlap, partial, vague, date, cat5_*) and
the reason. The judge (scgmem.scoring.judge, the pinned prompt) labels each triple `--runs` times;
a triple's judge label is its majority (ties: WRONG). Printed: agreement, Cohen's kappa and the
confusion counts, overall and per kind.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from scgmem.scoring.judge import Judge, JudgeItem, agreement
from scgmem.scoring.judge_prompt import CORRECT, JUDGE_PROMPT_VERSION, WRONG


def read_fixture(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if row.get("label") not in (CORRECT, WRONG):
                raise ValueError(f"{path}:{n}: label must be CORRECT or WRONG, got {row.get('label')!r}")
            rows.append(row)
    return rows


def judge_fixture(rows: list[dict], llm, runs: int) -> list[str]:
    """The judge's majority label per row (greedy runs)."""
    judge = Judge(llm, runs=runs)
    items = [JudgeItem(r["sample_id"], r["qa_index"], r["category"], r["question"], r["gold"], r["prediction"])
             for r in rows]
    votes = [Counter() for _ in rows]
    for _ in range(runs):
        for vote, verdict in zip(votes, judge.label(items)):
            vote[verdict.label] += 1
    return [CORRECT if v[CORRECT] > v[WRONG] else WRONG for v in votes]


def report(rows: list[dict], judged: list[str]) -> dict:
    out = {"prompt_version": JUDGE_PROMPT_VERSION, **agreement([r["label"] for r in rows], judged), "by_kind": {}}
    for kind in sorted({r["kind"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["kind"] == kind]
        out["by_kind"][kind] = agreement([rows[i]["label"] for i in idx], [judged[i] for i in idx])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fixture", type=Path)
    p.add_argument("--model", default="smollm2-135m", help="a configs/model name, an HF folder or a hub id")
    p.add_argument("--model-set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the result (with each row's labels) here")
    args = p.parse_args()
    from scgmem.report.judged import load_judge_llm

    rows = read_fixture(args.fixture)
    llm = load_judge_llm(args.model, args.model_set)
    judged = judge_fixture(rows, llm, args.runs)
    result = {"model": llm.name, "runs": args.runs, "fixture": str(args.fixture), **report(rows, judged),
              "rows": [{"source": r["source"], "sample_id": r["sample_id"], "qa_index": r["qa_index"],
                        "kind": r["kind"], "human": r["label"], "judge": j} for r, j in zip(rows, judged)]}
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
