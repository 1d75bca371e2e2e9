"""SCG-Mem on the llama.cpp server (Q4_1 GGUF, llama.cpp kernels) against the local backend (the same
weights de-quantised, fp32 torch) on one slice: how far the two memories and answers agree.

    experiments/served_agreement.sh                      # both runs (conv-26 sessions 1-4), then:
    python -m experiments.served_agreement <local run dir> <served run dir> > results/served/agreement.md

Reported: keys per turn (the concepts each turn was grounded in; mean Jaccard over turns), recall
seeds per question (mean overlap |A & B| / max(|A|, |B|), and exact-equal share), and the average F1
of each run with the paired stratified bootstrap of served - local (10,000 resamples). The weights
differ in their numerics (Q4_1 blocks against de-quantised floats), so identity is not expected.
"""
from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path


def turn_keys(run: Path, sample: str) -> dict[str, set[str]]:
    memory = json.loads((run / "memory" / f"{sample}.json").read_text())
    out: dict[str, set[str]] = {}
    for concept, ids in memory["concepts"].items():
        for d in ids:
            out.setdefault(d, set()).add(concept)
    return out


def records(run: Path) -> dict[tuple, dict]:
    out = {}
    for line in (run / "predictions.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[(r["sample_id"], r["qa_index"])] = r
    return out


def as_list(value) -> list:
    return value if isinstance(value, list) else ast.literal_eval(value) if value else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("local", type=Path)
    parser.add_argument("served", type=Path)
    parser.add_argument("--engine", default="llama.cpp", help="the served run's engine, for the title")
    args = parser.parse_args()
    from scgmem.report.collect import load_run
    from scgmem.report.paired import paired_average

    a, b = records(args.local), records(args.served)
    common = sorted(set(a) & set(b))
    samples = sorted({s for s, _ in common})
    jac = []
    for s in samples:
        ka, kb = turn_keys(args.local, s), turn_keys(args.served, s)
        for d in sorted(set(ka) | set(kb)):
            x, y = ka.get(d, set()), kb.get(d, set())
            jac.append(len(x & y) / len(x | y) if x | y else 1.0)
    overlap, equal = [], 0
    for key in common:
        x, y = as_list(a[key].get("seed_keys")), as_list(b[key].get("seed_keys"))
        overlap.append(len(set(x) & set(y)) / max(len(set(x)), len(set(y)), 1))
        equal += x == y
    diff = paired_average(load_run(args.served), load_run(args.local))
    sa, sb = (json.loads((r / "summary.json").read_text()) for r in (args.local, args.served))
    same = {f: sum(a[k].get(f) == b[k].get(f) for k in common)
            for f in ("seed_keys", "context_keys", "retrieved", "prompt_tokens", "prediction")}
    memory_equal = all((args.local / "memory" / f"{s}.json").read_bytes()
                       == (args.served / "memory" / f"{s}.json").read_bytes() for s in samples)
    print(f"# SCG-Mem: {args.engine} server vs local backend ({', '.join(samples)}, {len(common)} questions)\n")
    print("| measure | value |\n|---|---|")
    print(f"| turns compared | {len(jac)} |")
    print(f"| keys per turn, mean Jaccard | {sum(jac) / len(jac):.3f} |")
    print(f"| turns with identical keys | {sum(j == 1.0 for j in jac)} of {len(jac)} |")
    print(f"| memory export (memory/<sample>.json) byte-identical | {'yes' if memory_equal else 'no'} |")
    print(f"| recall seeds, mean overlap | {sum(overlap) / len(overlap):.3f} |")
    print(f"| questions with identical seeds | {equal} of {len(common)} |")
    for field, label in (("context_keys", "context keys"), ("retrieved", "retrieved turns"),
                         ("prompt_tokens", "answer prompt tokens"), ("prediction", "answers")):
        print(f"| questions with identical {label} | {same[field]} of {len(common)} |")
    print(f"| average F1, local | {sa['average']['f1']:.2f} |")
    print(f"| average F1, served | {sb['average']['f1']:.2f} |")
    print(f"| served - local, average F1 (paired, 95% CI) | {diff['diff']:+.2f} [{diff['ci_low']:+.2f}, {diff['ci_high']:+.2f}], "
          f"p (two-sided) {diff['p_value']:.3f}, {diff['n']} paired questions |")
    print(f"| schema size, local / served | {sa['method_stats']['final'][samples[0]]['schema_size']} / "
          f"{sb['method_stats']['final'][samples[0]]['schema_size']} |")
    print(f"| keys outside the schema, served | {sb['structural_hallucination_counts']} |")


if __name__ == "__main__":
    main()
