"""The LLM work a run's own processes did, read from its run directory (used by bench_compute_bound.py).

    from scripts.compute_bound_runs import load_run, work_done_here

A summary counts the ingest of every memory loaded from the memory cache and the answers an
earlier process of a resumed run wrote; measured against the wall time of the processes that ran,
those are work they did not do. Split out of scripts/bench_compute_bound.py (issue 40: files <= 400 lines).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from scgmem.report.merge_fields import add_numbers


def load_run(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no run summary (is --run a finished run directory?)")
    return json.loads(path.read_text())


# The pipeline's log line for a memory built by an earlier process (scgmem/harness/pipeline.py).
LOADED_FROM_CACHE = re.compile(r"memory of (\S+) loaded from (\S+\.json)")
RESUMED = re.compile(r"resuming: (\d+) predictions already in")


def read_log(run_dir: Path) -> str:
    log_path = run_dir / "run.log"
    return log_path.read_text(errors="replace") if log_path.is_file() else ""


def earlier_answer_s(run_dir: Path, log: str) -> float:
    """Answer seconds of the predictions an earlier process of a resumed run wrote: a summary's
    answer_s sums every record's latency_s, these included (run.log's last "resuming: N" line)."""
    found = RESUMED.findall(log)
    if not found:
        return 0.0
    with open(run_dir / "predictions.jsonl", encoding="utf-8") as f:
        earlier = [json.loads(line) for _, line in zip(range(int(found[-1])), f)]
    return sum(float(r.get("latency_s", 0.0)) for r in earlier)


def cached_ingest(run_dir: Path, log: str) -> dict[str, dict]:
    """Ingest usage and seconds of the memories a run loaded from the memory cache instead of
    building them (run.log's "memory of <id> loaded from <path>", the latest line per conversation)."""
    paths = {sample_id: Path(path) for sample_id, path in LOADED_FROM_CACHE.findall(log)}
    out = {}
    for sample_id, path in paths.items():
        if not path.is_file():
            raise FileNotFoundError(f"{path}: memory named in {run_dir / 'run.log'} is gone; "
                                    "its ingest cannot be subtracted")
        entry = json.loads(path.read_text())
        out[sample_id] = {"usage": (entry.get("usage") or {}).get("ingest", {}), "ingest_s": entry.get("ingest_s", 0.0)}
    return out


def work_done_here(run_dirs: list[Path]) -> dict:
    """One summary for shards that ran side by side, one process each, holding only the LLM work their
    processes did: tokens and timings summed over the shards, less the ingest of every memory loaded
    from the cache (a summary counts a loaded memory's ingest as part of the run's cost: right for
    the run, wrong against the wall time of processes that did not do that work). Answers written by
    an earlier process of a resumed run are not in its summary's tokens, so nothing to subtract there."""
    summaries = [load_run(d) for d in run_dirs]
    tokens = add_numbers([s.get("tokens") or {} for s in summaries])
    timing = add_numbers([{k: v for k, v in (s.get("timing") or {}).items() if k in ("ingest_s", "answer_s")}
                          for s in summaries])
    subtracted = {}
    for run_dir in run_dirs:
        log = read_log(run_dir)
        earlier = earlier_answer_s(run_dir, log)
        if earlier:
            timing["answer_s"] = timing.get("answer_s", 0.0) - earlier
            subtracted[f"{run_dir.name}/answers written by an earlier process"] = {"answer_s": earlier}
        for sample_id, entry in cached_ingest(run_dir, log).items():
            ingest = tokens.setdefault("ingest", {})
            for key, value in entry["usage"].items():
                if isinstance(value, (int, float)) and isinstance(ingest.get(key), (int, float)):
                    ingest[key] -= value
            timing["ingest_s"] = timing.get("ingest_s", 0.0) - float(entry["ingest_s"])
            subtracted[f"{run_dir.name}/{sample_id}"] = entry
    return {**summaries[0], "tokens": tokens, "timing": timing,
            "n_questions": sum(int(s.get("n_questions") or 0) for s in summaries),
            "shards": [str(d) for d in run_dirs], "cached_ingest_subtracted": subtracted}
