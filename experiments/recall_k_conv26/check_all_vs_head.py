"""`method.turns_per_concept=all` reproduces the contexts of the code before the option existed.

For every question of the given run directories, the ranked active concepts the run recorded
(`context_keys`) are mapped to a context twice: by `rank_turns` + `reconstruct_context` of the
commit given (the code before the change, read with `git show`), and by today's code with
`turns_per_concept=None` ("all"). Both use the run's exported memory (concept -> dia_ids) and
the same token counter, at several token budgets (the runner's budget for SmolLM2-135M is about
8K; smaller ones exercise the cut). Prints the number of (question, budget) pairs compared and
how many differ; as a control that the comparison can fail, also how many differ from
`turns_per_concept=1`. Also prints the full-context prompt size of the run's slice (every turn).

    .venv/bin/python -m experiments.recall_k_conv26.check_all_vs_head <commit> <run dir>...
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from transformers import AutoTokenizer

from scgmem.core import recall as today
from scgmem.data.locomo import load_locomo, select
from scgmem.api import render_turns_by_date

BUDGETS = (300, 1000, 3000, 8000)


def old_recall(commit: str):
    source = subprocess.run(["git", "show", f"{commit}:scgmem/core/recall.py"], check=True, capture_output=True,
                            text=True).stdout
    path = Path(tempfile.mkdtemp()) / "recall_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("recall_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(commit: str, run_dirs: list[str]) -> None:
    before = old_recall(commit)
    tokenizer = AutoTokenizer.from_pretrained(str(Path.home() / ".cache/scgmem/models/SmolLM2-135M-Instruct.Q4_1"))
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    conversations, _ = load_locomo("/work/shared/locomo/locomo10.json")
    compared = differ = differ_one = 0
    for run in map(Path, run_dirs):
        max_sessions = json.loads((run / "summary.json").read_text())["data"].get("max_sessions")
        records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
        for sample_id in sorted({r["sample_id"] for r in records}):
            (conv,) = select(conversations, [sample_id], max_sessions=max_sessions)
            turns = {t.dia_id: t for t in conv.turns}
            index = json.loads((run / "memory" / f"{sample_id}.json").read_text())["concepts"]
            turn_concepts: dict[str, list[str]] = {}
            for concept, ids in index.items():
                for d in ids:
                    turn_concepts.setdefault(d, []).append(concept)
            print(f"{run.name} {sample_id}: {len(turns)} turns, full-context transcript "
                  f"{count(render_turns_by_date(list(conv.turns)))} tokens")
            for r in (r for r in records if r["sample_id"] == sample_id):
                ranked = r["context_keys"]
                for budget in BUDGETS:
                    old = before.reconstruct_context(before.rank_turns(ranked, index, turn_concepts), turns, budget,
                                                     count)
                    new = today.reconstruct_context(today.rank_turns(ranked, index, turn_concepts, None), turns,
                                                    budget, count)
                    one = today.reconstruct_context(today.rank_turns(ranked, index, turn_concepts, 1), turns,
                                                    budget, count)
                    compared += 1
                    differ += old != new
                    differ_one += old != one
    print(f"compared {compared} (question, budget) pairs; {differ} differ from turns_per_concept=all; "
          f"{differ_one} differ from turns_per_concept=1 (control)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
