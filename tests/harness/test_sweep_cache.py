"""Sweeps over recall knobs reuse the ingested memory: a two-point k sweep ingests once."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~3-10 min on 2 cores: runs two jobs of SCG-Mem
def test_two_point_k_sweep_builds_memory_once(tmp_path):
    cache = tmp_path / "cache"
    models = Path(os.environ.get("SCGMEM_CACHE", Path.home() / ".cache" / "scgmem")) / "models"
    cache.mkdir()
    (cache / "models").symlink_to(models)  # share the de-quantised model, start with no memory cache
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "scgmem.run", "-m", "method=scgmem", "method.k=5,10", "data.samples=[conv-26]",
           "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "SCGMEM_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = sorted(sweep.rglob("summary.json"))
    assert len(summaries) == 2
    first, second = (json.loads(p.read_text()) for p in summaries)
    hits = sorted(s["timing"]["memory_cache_hits"] for s in (first, second))
    assert hits == [0, 1]  # the second job loaded what the first built
    # The memory's cost is reported in both, from one ingestion.
    assert first["tokens"]["ingest"] == second["tokens"]["ingest"] and first["tokens"]["ingest"]["calls"] > 0
    assert len(list((cache / "memory" / "scgmem").glob("*/conv-26.json"))) == 1
    # ...and the memory is the same one: identical exported schema and graph.
    exports = [json.loads(p.read_text()) for p in sorted(sweep.rglob("memory/conv-26.json"))]
    assert len(exports) == 2 and exports[0] == exports[1]
