"""Predictions of every method on a small slice, written so two checkouts can be compared byte for byte.

A restructure must not change what a method answers. Run this once on the code before the change
and once after, each with that checkout on PYTHONPATH, then `diff -r` the two output folders:

    PYTHONHASHSEED=0 PYTHONPATH=<old checkout> python -m experiments.prediction_identity /tmp/before
    PYTHONHASHSEED=0 PYTHONPATH=$PWD python -m experiments.prediction_identity /tmp/after
    diff -r /tmp/before /tmp/after && echo identical

Two passes per method (the configs come from the checkout on PYTHONPATH):
- scripted/<method>.jsonl: the harness on the scripted echo model and a bag-of-words embedder
  (scgmem/testing/scripted.py), conv-26 sessions 1-3, 2 questions per category; each line is a
  prediction record without its wall time, and prompts/<method>.txt holds every prompt the model
  received, so a changed retrieval or prompt shows even where the echo reply hides it.
  SCG-Mem (constrained decoding needs a real tokenizer) and LoCoMo's RAG (its config reads
  data.path, which the scripted pipeline has not) are in the model pass only.
- model/<method>.jsonl: `python -m scgmem.run` on the embedded SmolLM2 model (conv-26 session 1,
  1 question per category, memory cache off), records without wall times. Skipped with --no-model.
PYTHONHASHSEED=0 fixes the scripted model's hashed word ids (Python salts str hashes per process).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from scgmem.method_lists import all_methods

# every method but SCG-Mem and LoCoMo's RAG (see above), in the order of scgmem/method_lists.py
SCRIPTED = [m for m in all_methods() if m not in ("scgmem", "rag_locomo")]
MODEL = ["scgmem", "rag_locomo", *SCRIPTED]
TIMING = {"latency_s"}  # the one field that is a wall time


def _records(path: Path) -> list[str]:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = {k: v for k, v in json.loads(line).items() if k not in TIMING}
        lines.append(json.dumps(record, sort_keys=True, ensure_ascii=False))
    return sorted(lines)


def scripted_pass(out: Path, data: Path) -> None:
    from scgmem.data.locomo import LoCoMoSource
    from scgmem.testing.scripted import fake_pipeline

    conv, _ = LoCoMoSource(path=str(data), samples=["conv-26"], max_sessions=3).load()
    (out / "scripted").mkdir(parents=True, exist_ok=True)
    (out / "prompts").mkdir(parents=True, exist_ok=True)
    for method in SCRIPTED:
        with tempfile.TemporaryDirectory() as tmp:
            pipeline = fake_pipeline(method, Path(tmp) / "run", parallel=1)
            pipeline.run(conv)
            lines = _records(Path(tmp) / "run" / "predictions.jsonl")
        (out / "scripted" / f"{method}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (out / "prompts" / f"{method}.txt").write_text("\n\x1e\n".join(pipeline._llm.prompts), encoding="utf-8")
        print(f"scripted {method}: {len(lines)} predictions, {len(pipeline._llm.prompts)} prompts", flush=True)


def model_pass(out: Path, data: Path) -> None:
    (out / "model").mkdir(parents=True, exist_ok=True)
    for method in MODEL:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "scgmem.run", f"method={method}", f"data.path={data}",
                   "data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1",
                   "run.use_memory_cache=false", "run.progress=false", f"hydra.run.dir={tmp}/run"]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
            if proc.returncode != 0:
                raise SystemExit(f"{method}: {' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
            lines = _records(Path(tmp) / "run" / "predictions.jsonl")
        (out / "model" / f"{method}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"model {method}: {len(lines)} predictions", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the normalised predictions")
    parser.add_argument("--data", type=Path, default=Path("data/locomo10.json"))
    parser.add_argument("--no-model", action="store_true", help="the scripted pass only")
    args = parser.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":
        raise SystemExit("set PYTHONHASHSEED=0: the scripted model's word ids are str hashes")
    data = args.data.resolve()
    scripted_pass(args.out, data)
    if not args.no_model:
        model_pass(args.out, data)


if __name__ == "__main__":
    main()
