"""Build scgmem/data/locomo_audit.json, the corrections `data.gold=audited` applies, from the LoCoMo audit.

    git clone https://github.com/dial481/locomo-audit /tmp/locomo-audit
    git -C /tmp/locomo-audit checkout 9493fb4b4af4256ed17a18e8fd0b3cfdeec29539
    python -m scripts.build_locomo_audit --audit /tmp/locomo-audit --data data/locomo10.json   # or: make locomo-audit

Reads audit/errors_conv_<i>.json (i = 0..9; the audit's `locomo_<i>` is the i-th sample of
locomo10.json, `qa<j>` the j-th entry of its `qa` list), checks every entry against
locomo10.json (the question text, category and gold answer must be the file's, else it stops
naming the entry), and writes one entry per audited question keyed "<sample_id>:<qa_index>".
The audit's `reasoning` is left out (read it in the source, by `audit_id`); no answer is edited.

The audit is CC BY-NC 4.0 (its LICENSE and README, read at the commit above); the output
records the source, the commit and the licence in its `_source` header.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "scgmem" / "data" / "locomo_audit.json"
REPOSITORY = "https://github.com/dial481/locomo-audit"
# The audit's taxonomy (its AUDIT_REPORT file): only WRONG_CITATION leaves the gold answer right.
CITATION_ONLY = "WRONG_CITATION"


def _commit(audit_dir: Path, given: str | None) -> str:
    if given:
        return given
    try:
        return subprocess.run(["git", "-C", str(audit_dir), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        sys.exit(f"error: {audit_dir}: not a git checkout; give the audit's commit with --commit")


def build(audit_dir: Path, data_path: Path, commit: str) -> dict:
    samples = json.loads(data_path.read_text(encoding="utf-8"))
    entries: dict[str, dict] = {}
    for i, sample in enumerate(samples):
        path = audit_dir / "audit" / f"errors_conv_{i}.json"
        for e in json.loads(path.read_text(encoding="utf-8")):
            prefix, _, j = e["question_id"].partition("_qa")
            where = f"{path.name} {e['question_id']}"
            if prefix != f"locomo_{i}" or not j.isdigit() or int(j) >= len(sample["qa"]):
                sys.exit(f"error: {where}: key does not name a question of sample {i} ({sample['sample_id']})")
            qa = sample["qa"][int(j)]
            if (qa["question"], qa["category"], str(qa.get("answer"))) != \
                    (e["question"], e["category"], str(e["golden_answer"])):
                sys.exit(f"error: {where}: question, category or gold answer differ from {data_path}")
            entries[f"{sample['sample_id']}:{int(j)}"] = {
                "audit_id": e["question_id"], "category": e["category"], "error_type": e["error_type"],
                "question": e["question"], "original_answer": e["golden_answer"],
                # The audit writes a corrected answer for every entry; for WRONG_CITATION it repeats the
                # gold answer, often with a note on the citation, so the gold answer stays.
                "corrected_answer": None if e["error_type"] == CITATION_ONLY else e["correct_answer"],
                "original_evidence": e["cited_evidence"], "corrected_evidence": e["correct_evidence"]}
    return {
        "_source": {
            "repository": REPOSITORY, "commit": commit,
            "files": "audit/errors_conv_0.json ... audit/errors_conv_9.json",
            "licence": "CC BY-NC 4.0 (https://creativecommons.org/licenses/by-nc/4.0/), the audit's and "
                       "LoCoMo's licence: reuse with attribution, non-commercial. The harness's own code is MIT; "
                       "this file is not.",
            "attribution": "LoCoMo benchmark audit by dial481 (github.com/dial481/locomo-audit), of the LoCoMo "
                           "dataset by Maharana, Lee, Tulyakov, Bansal, Barbieri and Fang (SNAP Research, "
                           "github.com/snap-research/locomo, CC BY-NC 4.0)",
            "changes": "re-keyed by '<sample_id>:<qa_index>' of locomo10.json; fields renamed; the audit's "
                       "reasoning left out; corrected_answer null for WRONG_CITATION entries (their answer is "
                       "right); no answer or evidence id edited",
            "built_by": "python scripts/build_locomo_audit.py --audit <checkout at commit> --data data/locomo10.json",
        },
        "entries": entries,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audit", required=True, help="a checkout of github.com/dial481/locomo-audit")
    parser.add_argument("--data", default=str(ROOT / "data" / "locomo10.json"))
    parser.add_argument("--commit", help="the audit's commit (default: the checkout's HEAD)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    audit_dir = Path(args.audit)
    result = build(audit_dir, Path(args.data), _commit(audit_dir, args.commit))
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(result['entries'])} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
