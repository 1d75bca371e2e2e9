"""Merge the run directories of one command sharded over conversations into one run directory.

On a CPU, two 1-thread processes use two cores far better than one 2-thread process (see
docs/performance.md), so a full LoCoMo run is launched as shards that differ only in
`data.samples`. This puts their halves back together as if one process had run:

    scgmem-report merge --out results/embedded/locomo_full RUN_A RUN_B

Predictions are concatenated (sample, then question order) and scored again from the records;
token counts, LLM calls, seconds and counters are summed; each shard's memory exports are
copied. Shards must agree on every setting except `data.samples` and the run directory, and
must not share a question: anything else is a one-line error naming the file and field.

Shards may also split one slice's questions (`run.question_shard=I/N`, same `data.samples`):
they load the same cached memories, so what describes building them (ingest seconds and tokens,
the method's deviations, keys generated while ingesting) is counted once per conversation set,
and the answering side is summed. Merge question shards and conversation shards in one call.
A merge of some of a slice's question shards is marked `partial` (with the shards it lacks), and
its `config.run.question_shard` lists the shards it holds; merging the rest in later completes it.
Shards may differ in how they reached their servers (`model.base_url`, `model.max_in_flight`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from scgmem.report.merge_fields import (add_numbers, check_same_settings, ingest_side, merged_data_info,
                                        merged_generation, subtract_numbers)
from scgmem.harness.checked_run import read_checked_run
from scgmem.report.collect import shown_path
from scgmem.report.output import write_output

SUMMARY = "summary.json"
PREDICTIONS = "predictions.jsonl"


class MergeError(ValueError):
    """A shard that cannot be merged; the message names the file and field."""


def _natural_key(sample_id: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", sample_id))


def _load_shard(run_dir: Path) -> tuple[dict, list[dict]]:
    """A shard read through the resume's checks (`scgmem.harness.checked_run`): its records recompute
    and its summary is their aggregate, or it is refused in one line (StoredFileError)."""
    summary_path = run_dir / SUMMARY
    if not os.path.lexists(summary_path):
        raise MergeError(f"{summary_path}: missing (has the shard finished?)")
    checked = read_checked_run(run_dir)
    return checked.summary, checked.records


def _slice(summary: dict) -> frozenset:
    return frozenset((summary.get("data") or {}).get("samples") or [])


def _repeated_slices(summaries: list[dict]) -> list[dict]:
    """Every summary whose conversation set an earlier one already has (question shards' repeats)."""
    seen, repeats = set(), []
    for s in summaries:
        if _slice(s) in seen:
            repeats.append(s)
        seen.add(_slice(s))
    return repeats


def _question_shards(summary: dict) -> list[str] | None:
    """The question shards a summary holds: ["I/N"], those of a partial merge, or None (all of them)."""
    held = ((summary.get("config") or {}).get("run") or {}).get("question_shard")
    return None if held is None else [str(x) for x in held] if isinstance(held, list) else [str(held)]


def missing_question_shards(paths: list[Path], summaries: list[dict]) -> tuple[dict, list[str]]:
    """({conversation set: the "I/N" shards no summary holds}, every shard held, in order). A slice
    whose shards split it differently (2 and 3 ways) is refused: their union is no fixed set."""
    from scgmem.harness.run_plan import parse_question_shard

    by_slice: dict[frozenset, list[tuple[int, int]] | None] = {}
    for path, summary in zip(paths, summaries):
        held = _question_shards(summary)
        if held is None or by_slice.get(_slice(summary), []) is None:
            by_slice[_slice(summary)] = None  # a run of the whole slice holds every question of it
            continue
        try:
            by_slice.setdefault(_slice(summary), []).extend(parse_question_shard(x) for x in held)
        except ValueError as e:
            raise MergeError(f"{path / SUMMARY}: field config.run.question_shard: {e}") from None
    missing, every = {}, []
    for samples, shards in by_slice.items():
        if not shards:
            continue
        counts = sorted({n for _, n in shards})
        if len(counts) > 1:
            raise MergeError(f"data.samples {sorted(samples)}: question shards of {counts} ways cannot be merged")
        every += [f"{i}/{counts[0]}" for i, _ in sorted(set(shards))]
        gone = [f"{i}/{counts[0]}" for i in range(counts[0]) if i not in {i for i, _ in shards}]
        if gone:
            missing[",".join(sorted(samples))] = gone
    return missing, every


def merge_summaries(shards: list[tuple[Path, dict]], records: list[dict]) -> dict:
    """One summary from the shards' summaries and the merged records (scores recomputed)."""
    from scgmem.scoring.answer_format import unparsed_count
    from scgmem.scoring.cat5 import summary_fields as category5_fields
    from scgmem.scoring.metrics import aggregate
    from scgmem.harness.summary import context_length

    paths = [p for p, _ in shards]
    summaries = [s for _, s in shards]
    check_same_settings(shards, MergeError)
    first = summaries[0]
    categories = {int(k): v for k, v in first["category_mapping"].items()}
    scores = aggregate(records, categories)
    # question shards repeat their slice's ingest side: take it away once for every repeat
    repeats = add_numbers([ingest_side(s) for s in _repeated_slices(summaries)])
    counts = subtract_numbers(add_numbers([s.get("structural_hallucination_counts") or {} for s in summaries]),
                              repeats.get("structural_hallucination_counts") or {})
    n = len(records)
    timing = subtract_numbers(add_numbers([s.get("timing") or {} for s in summaries]), repeats.get("timing") or {})
    timing.pop("answer_s_per_question", None)
    if n and "answer_s" in timing:
        timing["answer_s_per_question"] = round(timing["answer_s"] / n, 4)
    merged = dict(first)
    merged.update({
        "n_questions": n,
        "categories": scores["categories"],
        "average": scores["average"],
        "overall_weighted": scores["overall_weighted"],
        **category5_fields(records, categories, first.get("protocol")),
        "answer_format": {"format": (first.get("answer_format") or {}).get("format"),
                          **(unparsed_count(records) or {})},
        "structural_hallucination_counts": counts or None,
        "structural_hallucination_rate": (counts["outside_schema"] / counts["generated"]
                                          if counts.get("generated") else (0.0 if counts else None)),
        "timing": timing,
        "tokens": subtract_numbers(add_numbers([s.get("tokens") or {} for s in summaries]), repeats.get("tokens") or {}),
        "tokens_questions": sum(int(s.get("tokens_questions", s["n_questions"])) for s in summaries),
        "context": context_length(records),
        "deviations": subtract_numbers(add_numbers([s.get("deviations") or {} for s in summaries]),
                                       repeats.get("deviations") or {}),
        "method_stats": {part: {k: v for s in summaries for k, v in (s.get("method_stats") or {}).get(part, {}).items()}
                         for part in ("ingest", "final")},
        "data": merged_data_info(summaries),
        "merged_from": [{"run_dir": shown_path(p), "n_questions": s["n_questions"],
                         "samples": (s.get("data") or {}).get("samples"), "timing": s.get("timing"),
                         "question_shard": ((s.get("config") or {}).get("run") or {}).get("question_shard")}
                        for p, s in zip(paths, summaries)],
    })
    if isinstance((first.get("config") or {}).get("data"), dict):  # the shards' union, not the first's slice
        merged["config"] = {**first["config"], "data": {**first["config"]["data"], "samples": merged["data"]["samples"]}}
    missing, held = missing_question_shards(paths, summaries)
    # A merge of some question shards holds some of each conversation's questions: it says so, here and
    # in every table built from it (scgmem/report/collect.py `caveats`), and names the shards it holds.
    merged["partial"] = None if not missing else {
        "missing_question_shards": missing, "question_shards": held,
        "why": f"merged question shards {', '.join(held)}; missing "
               + "; ".join(f"{', '.join(v)} of {k}" for k, v in missing.items())}
    if isinstance((first.get("config") or {}).get("run"), dict) and "question_shard" in first["config"]["run"]:
        merged["config"]["run"] = {**first["config"]["run"], "question_shard": held if missing else None}
    if "generation" in first:
        merged["generation"] = merged_generation(summaries)
    if "outputs_cut_at_cap" in first:
        merged["outputs_cut_at_cap"] = sum(int(s.get("outputs_cut_at_cap") or 0) for s in summaries)
    if "oom" in first:  # batches split after CUDA out-of-memory, summed over the shards
        merged["oom"] = add_numbers([s.get("oom") or {} for s in summaries])
    merged.pop("placement", None)  # each shard ran on its own device
    return merged


def merge_runs(run_dirs: list[Path], out_dir: Path) -> Path:
    """Write OUT_DIR/{summary.json, predictions.jsonl, memory/}; returns the summary's path."""
    if len(run_dirs) < 2:
        raise MergeError("merge: give at least two run directories")
    out_dir = Path(out_dir)
    if (out_dir / SUMMARY).exists() or (out_dir / PREDICTIONS).exists():
        raise MergeError(f"{out_dir}: already holds a run; merge into a new directory")
    loaded = [(Path(d), *_load_shard(Path(d))) for d in run_dirs]
    slices: dict[str, tuple[Path, frozenset]] = {}
    for path, summary, _ in loaded:  # conversation shards are disjoint; question shards share the whole slice
        mine = _slice(summary)
        for sample_id in sorted(mine):
            other, theirs = slices.setdefault(sample_id, (path, mine))
            if theirs != mine:
                raise MergeError(f"{path / SUMMARY}: field data.samples shares {sample_id} with {other / SUMMARY} "
                                 "but not all its conversations (question shards must split the same slice)")
    owner: dict[tuple, Path] = {}
    for path, _, records in loaded:
        for r in records:
            key = (r["sample_id"], r["qa_index"])
            if key in owner:
                raise MergeError(f"{path / PREDICTIONS}: sample_id {key[0]} qa_index {key[1]} is also in "
                                 f"{owner[key] / PREDICTIONS}")
            owner[key] = path
    records = sorted((r for _, _, rs in loaded for r in rs),
                     key=lambda r: (_natural_key(r["sample_id"]), r["qa_index"]))
    summary = merge_summaries([(p, s) for p, s, _ in loaded], records)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path, _, _ in loaded:
        if (path / "memory").is_dir():
            shutil.copytree(path / "memory", out_dir / "memory", dirs_exist_ok=True)
    write_output(out_dir / PREDICTIONS, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    summary_path = write_output(out_dir / SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary_path
