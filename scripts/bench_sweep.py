"""Bench part `sweep` and the optional full run: `scgmem-run` in a child process, timed.

    BENCH_PARTS=sweep make bench      # an 8-point k sweep / one run of the same slice
    make bench-full                   # plus a full LoCoMo SCG-Mem run (BENCH_FULL=1)

The sweep's memory is built once (the cache) and the rest of its time is answering: the ratio's
floor is (single + the other points' answering) / single, computed from the sweep's own summaries.
A tiny run (BENCH_TINY=1) runs the same commands on the tiny random Llama (`model=local`).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from scripts.bench_inputs import ROOT, Scale


def model_overrides(tiny_dir: Path | None) -> list[str]:
    """The run's model: the default (embedded SmolLM2-135M), or the tiny random Llama's folder."""
    if tiny_dir is None:
        return []
    return ["model=local", f"model.path={tiny_dir}", "model.context_window=2048", "model.device=cpu"]


def run_cli(args: list[str], cache: Path) -> tuple[float, int]:
    """Run scgmem-run in a child; returns (wall seconds, exit code)."""
    env = {**os.environ, "SCGMEM_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    models = Path(os.environ.get("SCGMEM_CACHE", Path.home() / ".cache" / "scgmem")) / "models"
    (cache / "models").parent.mkdir(parents=True, exist_ok=True)
    if models.is_dir() and not (cache / "models").exists():
        os.symlink(models, cache / "models")  # share the de-quantised model, not the memory cache
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "scgmem.run", *args, "run.progress=false"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return time.perf_counter() - t0, proc.returncode


def bench_sweep(tmp: Path, scale: Scale = Scale("full"), tiny_dir: Path | None = None) -> dict:
    """Wall time of a k sweep / one run of the same slice, and what the sweep's summaries say."""
    slice_ = ["data.samples=[conv-26]", f"data.max_sessions={scale.pick(4, 2, 1)}", "data.questions_per_category=1",
              *model_overrides(tiny_dir)]
    single_dir = tmp / "single"
    single_s, rc1 = run_cli([*slice_, "method.k=35", f"hydra.run.dir={single_dir}"], tmp / "cache-single")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ks = scale.pick("5,10,15,20,25,30,35,40", "5,10,15,20,25,30,35,40", "5,35")
    sweep_s, rc2 = run_cli(["-m", *slice_, f"method.k={ks}", f"hydra.sweep.dir={tmp / 'sweep'}"], tmp / "cache-sweep")
    if rc1 or rc2:
        raise RuntimeError(f"bench sweep: scgmem-run exited {rc1} (single) / {rc2} (sweep); its stderr is above")
    summary = json.loads((single_dir / "summary.json").read_text())
    turns = sum(s["n_turns"] for s in (json.loads(p.read_text()) for p in (single_dir / "memory").glob("*.json")))
    timing = summary.get("timing", {})
    # Memory reuse, read from the sweep's own summaries: a job that built memory has no cache hit.
    points = [json.loads(p.read_text()) for p in sorted((tmp / "sweep").rglob("summary.json"))]
    answer_s = [pt["timing"]["answer_s"] for pt in points]
    memo_hits = sum((pt.get("tokens") or {}).get("answer", {}).get("memo_hits", 0) for pt in points)
    answer_calls = sum((pt.get("tokens") or {}).get("answer", {}).get("calls", 0) for pt in points)
    return {
        "slice": slice_, "k_points": ks, "single_s": single_s, "sweep_s": sweep_s, "exit_codes": [rc1, rc2],
        "sweep_ratio": sweep_s / single_s,
        "sweep_points": len(points),
        "sweep_memory_builds": sum(1 for pt in points if pt["timing"]["memory_cache_hits"] == 0),
        # Answer calls of later points whose prompt (context included) repeated an earlier point's.
        "sweep_answer_memo_hits": memo_hits, "sweep_answer_calls": answer_calls,
        "single_ingest_s": timing.get("ingest_s"), "single_answer_s": timing.get("answer_s"),
        # What a sweep cannot avoid: answering every point's questions. The floor of sweep_ratio
        # with memory built once is (single + (points - 1) * answer) / single.
        "sweep_answer_s_total": sum(answer_s),
        "sweep_ratio_floor": (single_s + sum(answer_s[1:])) / single_s if answer_s else None,
        "turns_per_s": turns / timing["ingest_s"] if turns and timing.get("ingest_s") else None,
        "questions_per_s": summary["n_questions"] / timing["answer_s"] if timing.get("answer_s") else None,
        "peak_rss_mb": peak_kb / 1024,
    }


def bench_full(out_dir: Path, tmp: Path, scale: Scale = Scale("full"), tiny_dir: Path | None = None) -> dict:
    """Wall time of a full LoCoMo SCG-Mem run (every default); a tiny run: one session of conv-26."""
    run_dir = out_dir / f"full-{datetime.now():%Y%m%d-%H%M%S}"
    slice_ = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1"] if scale.tiny else []
    wall, rc = run_cli([*slice_, *model_overrides(tiny_dir), f"hydra.run.dir={run_dir}"], tmp / "cache-full")
    return {"wall_s": wall, "wall_min": wall / 60, "exit_code": rc, "run_dir": str(run_dir), "slice": slice_}


def report_rows(sweep: dict) -> list[tuple]:
    """The lines `make bench` prints for the sweep."""
    return [
        ("sweep_ratio (k sweep / single)", sweep["sweep_ratio"], "<= 1.3"),
        ("  memory builds in the sweep", sweep["sweep_memory_builds"], "1"),
        ("  answer calls served by the memo", sweep["sweep_answer_memo_hits"], str(sweep["sweep_answer_calls"])),
        ("  floor: single + the other points' answering", sweep["sweep_ratio_floor"], ""),
        ("turns/s (ingest)", sweep["turns_per_s"], ""),
        ("questions/s (answer)", sweep["questions_per_s"], ""),
        ("peak RSS MB", sweep["peak_rss_mb"], "<= 4096"),
    ]
