"""`scgmem-report judge RUN_DIR`: the LLM judge on a finished run, without rerunning its method.

    scgmem-report judge results/runs/2026-01-01/12-00-00                 # embedded SmolLM2-135M, 3 runs
    scgmem-report judge RUN --model qwen2.5-1.5b --runs 3                 # a model config
    scgmem-report judge RUN --model /models/Qwen2.5-7B-Instruct           # an HF folder (or a hub id)
    scgmem-report judge RUN --model openai_compatible --model-set base_url=http://127.0.0.1:8000/v1 \\
        --model-set model_id=Qwen/Qwen2.5-7B-Instruct                    # a served model
    scgmem-report judge RUN --samples conv-26 --out results/embedded/judge/conv26   # part of a run, elsewhere

Writes judgements.jsonl and judge.json (scgmem/harness/judging.py: resumable, one judge per
directory) and judge_summary.json into --out (default: RUN_DIR itself, where the tables find
them and show J beside F1). A killed judge resumes where it stopped.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from scgmem.report.collect import load_run, shown_path
from scgmem.report.paired import N_RESAMPLES

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"


def add_parser(sub) -> None:
    p = sub.add_parser("judge", help="the LLM judge (J) on a finished run's predictions",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a finished run directory (summary.json + predictions.jsonl)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="judge model: a configs/model name, an HF folder or a hub id (default: %(default)s)")
    p.add_argument("--model-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override of the judge model's config, e.g. base_url=... (repeatable)")
    p.add_argument("--runs", type=int, default=3, help="judgements per prediction (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="cap on a judge reply (default: %(default)s)")
    p.add_argument("--cat5-gold", default="not_mentioned", choices=("not_mentioned", "reference"),
                   help="category 5's gold for the judge (default: %(default)s; docs/scoring.md)")
    p.add_argument("--samples", nargs="+", default=None, help="judge only these conversations (e.g. conv-26)")
    p.add_argument("--out", default=None, help="where the labels and judge_summary.json go (default: RUN_DIR)")
    p.add_argument("--chunk", type=int, default=64, help="predictions per generate call and write (default: %(default)s)")
    p.add_argument("--n-resamples", type=int, default=N_RESAMPLES, help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of sampled judgements and of the bootstrap")


def load_judge_llm(model: str, sets: list[str]):
    """The judge model, loaded under the default chat policy."""
    from hydra.utils import instantiate

    from scgmem.harness.judging import judge_model_node
    from scgmem.llm.chat_template import ChatPolicy

    llm = instantiate(judge_model_node(model, sets))
    llm.set_chat_policy(ChatPolicy())
    return llm


def judge_command(args, llm=None) -> Path:
    """Judge `args.run_dir`; returns the judge_summary.json written. `llm`: a loaded judge model
    (tests pass a scripted one), else `args.model` is loaded."""
    from scgmem.harness.judging import JUDGE_SUMMARY, judge_options, judge_records, make_judge
    from scgmem.harness.records import write_json_atomic

    run = load_run(args.run_dir)
    records = run.records
    if args.samples:
        records = [r for r in records if r["sample_id"] in set(args.samples)]
        if not records:
            raise ValueError(f"{run.run_dir}: no predictions of samples {args.samples}")
    options = judge_options({"model": args.model, "runs": args.runs, "temperature": args.temperature,
                             "max_new_tokens": args.max_new_tokens, "cat5_gold": args.cat5_gold})
    out = Path(args.out) if args.out else run.run_dir
    if llm is None:
        llm = load_judge_llm(args.model, args.model_set)
    judge = make_judge(options, llm)
    result = judge_records(judge, records, out, run.category_mapping, seed=args.seed, chunk=args.chunk,
                           n_resamples=args.n_resamples)
    summary = {"run_dir": shown_path(run.run_dir), "method": run.method, "model": run.model,
               "samples": sorted({r["sample_id"] for r in records}), "n_questions": len(records),
               **result}
    path = out / JUDGE_SUMMARY
    write_json_atomic(path, summary)
    return path


def summary_lines(summary: dict) -> list[str]:
    """One line per category and the two averages: mean ± std over runs [CI]."""
    def fmt(d: dict) -> str:
        std = "–" if d.get("std") is None else f"{d['std']:.2f}"
        ci = "–" if not d.get("ci") else f"[{d['ci'][0]:.2f}, {d['ci'][1]:.2f}]"
        mean = "–" if d.get("mean") is None else f"{d['mean']:.2f}"
        return f"{mean} ± {std} {ci}"
    lines = [f"judge {summary['settings']['model']} ({summary['settings']['prompt_version']}), "
             f"{summary['n_runs']} runs, {summary['unparsed']['count']} of {summary['unparsed']['of']} unparsed"]
    lines += [f"  {name}: J {fmt(d)} (n={d['n']})" for name, d in summary["categories"].items()]
    lines += [f"  average: J {fmt(summary['average'])}", f"  overall_weighted: J {fmt(summary['overall_weighted'])}"]
    return lines
