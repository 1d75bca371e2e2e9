"""Evidence recall a run's retrieval reached, beside what the same number of turns drawn at random
from the conversation would reach (the floor a memory must beat to be retrieving anything).

    .venv/bin/python -m experiments.chance_evidence_recall results/embedded/locomo_full/predictions.jsonl \
        [--data data/locomo10.json] [--json out.json]

For a question whose context held n distinct turns of a conversation of N turns, a uniformly random
n-subset holds each gold evidence turn with probability n / N, so its expected recall is n / N times
the share of gold ids that name a turn of the conversation. Records without evidence are skipped,
as in the run's own evidence_recall.
"""
from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

from scgmem.api.types import OFFICIAL_CATEGORIES  # noqa: E402
from scgmem.data.locomo import load_locomo  # noqa: E402


def read_records(path: Path) -> list[dict]:
    """predictions.jsonl or .jsonl.gz, read only (scgmem.harness.records.read_predictions repairs
    a run's own file in place, which an analysis must not do)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def chance_recall(evidence: list[str], retrieved: list[str], turn_ids: set[str]) -> float | None:
    gold = set(evidence)
    if not gold:
        return None
    n = len(set(retrieved) & turn_ids)
    return len(gold & turn_ids) / len(gold) * min(1.0, n / len(turn_ids))


def compare(records: list[dict], turn_ids: dict[str, set[str]]) -> dict:
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in records:
        if r.get("evidence_recall") is None:
            continue
        chance = chance_recall(r["evidence"], r.get("retrieved") or [], turn_ids[r["sample_id"]])
        for key in (OFFICIAL_CATEGORIES.get(r["category"], str(r["category"])), "all"):
            sums[key][0] += r["evidence_recall"]
            sums[key][1] += chance
            sums[key][2] += 1
    order = [*OFFICIAL_CATEGORIES.values(), "all"]
    return {k: {"n": n, "evidence_recall": got / n, "chance": chance / n, "ratio": got / chance if chance else None}
            for k, (got, chance, n) in sorted(sums.items(), key=lambda kv: order.index(kv[0])
                                              if kv[0] in order else len(order))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path)
    parser.add_argument("--data", type=Path, default=Path("data/locomo10.json"))
    parser.add_argument("--json", type=Path, help="also write the comparison here")
    args = parser.parse_args()
    conversations, _ = load_locomo(args.data)
    turn_ids = {c.sample_id: {t.dia_id for t in c.turns} for c in conversations}
    result = compare(read_records(args.predictions), turn_ids)
    print("| category | n | evidence recall | chance (same n of turns at random) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for key, row in result.items():
        print(f"| {key} | {row['n']} | {row['evidence_recall']:.3f} | {row['chance']:.3f} | {row['ratio']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
