"""How fast the harness can drive an engine (issue 57, item 3): a recorded run again, against its own replies.

    python -m scripts.bench_drive_rate <run_dir> [<run_dir> ...] [--parallel 1 10] [--port 18211] [--out x.json]

For each run directory (a served run with `model.record_requests=true`, recorded with replies): the
content-replay server (scripts/replay_server.py) answers every request at once with the recorded reply,
and `scgmem-run` runs again with the run's own overrides (.hydra/overrides.yaml; the server address,
the run folder and an empty memory cache replaced; `run.parallel_conversations` as given). The harness
is then the only thing that takes time: requests/s and tokens/s (the recorded tokens of the requests it
sent) over its ingest + answer seconds are the most it can drive an engine at. Misses (a request the
recording does not hold: the run went another way) are counted; a run with misses fails. A run whose model
has an engine probes it before recording: record the probe's requests once against the real server
(`OpenAICompatibleLLM(..., record_requests=True)`, `record_requests_to`, `check_engine()`) and name
that folder with `--probe`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from scgmem.harness.safe_files import open_nofollow, read_json_file
from scgmem.llm.served.request_profile import read_records, tokens
from scripts.bench_replay import run_seconds
from scripts.replay_server import Replies, serve

ROOT = Path(__file__).resolve().parents[1]
REPLACED = ("model.base_url=", "hydra.run.dir=", "run.cache_dir=", "run.parallel_conversations=",
            "model.record_requests=")


def _cache_hits(run_dir: Path) -> int:
    path = run_dir / "summary.json"
    try:
        hits = read_json_file(path, 1 << 24)["timing"].get("memory_cache_hits", 0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(f"error: {path}: timing.memory_cache_hits unreadable ({e})") from None
    if not isinstance(hits, int) or isinstance(hits, bool) or hits < 0:
        raise SystemExit(f"error: {path}: timing.memory_cache_hits is {hits!r}, not a count")
    return hits


def drive(run_dir: Path, parallel: int, port: int, extra: tuple[Path, ...] = ()) -> dict:
    """`extra`: more recorded folders whose replies the server also holds (the engine probe's, which
    a run sends before it records: `--probe`)."""
    def read(folder):
        return read_records(folder / "requests.jsonl", lambda p: open_nofollow(p, "rb"))
    hits = _cache_hits(run_dir)
    if hits:  # its ingest never reached the server, so the replay would miss every ingest request
        return {"run_dir": str(run_dir), "parallel": parallel,
                "failed": f"{run_dir / 'summary.json'}: timing.memory_cache_hits is {hits}: the recorded run loaded "
                          "memory from its cache and did not record the ingest; record it again with "
                          "run.cache_dir=<an empty folder>"}
    records = read(run_dir)
    replies = Replies(records + [r for folder in extra for r in read(folder)])
    server = serve(replies, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    overrides = [o for o in (run_dir / ".hydra" / "overrides.yaml").read_text().splitlines()]
    overrides = [o.removeprefix("- ").strip().strip("'\"") for o in overrides if o.startswith("- ")]
    overrides = [o for o in overrides if not o.startswith(REPLACED)]
    work = Path(tempfile.mkdtemp(prefix="drive-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        cmd = [sys.executable, "-m", "scgmem.run", *overrides, f"model.base_url=http://127.0.0.1:{port}/v1",
               f"run.parallel_conversations={parallel}", f"hydra.run.dir={work / 'run'}",
               f"run.cache_dir={work / 'cache'}"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"run_dir": str(run_dir), "parallel": parallel, "failed": tail, **replies.stats}
        seconds = run_seconds(work / "run")  # the harness's ingest + answer seconds, checked
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(work, ignore_errors=True)
    sent = replies.stats["answered"]
    recorded_tokens = sum(tokens(r) for r in records)
    return {"run_dir": str(run_dir), "parallel": parallel, **replies.stats, "harness_s": round(seconds, 3),
            "wall_s": round(wall, 2), "requests_per_s": round(sent / max(seconds, 1e-9), 1),
            "tokens_per_s": round(recorded_tokens * sent / max(len(records), 1) / max(seconds, 1e-9), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--parallel", nargs="+", type=int, default=[1, 10])
    ap.add_argument("--port", type=int, default=18211)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--probe", nargs="*", type=Path, default=[],
                    help="folders with a recorded engine probe (model.engine runs probe before recording)")
    args = ap.parse_args()
    load = list(os.getloadavg())
    rows = [drive(d, p, args.port + i, tuple(args.probe)) for d in args.run_dirs for i, p in enumerate(args.parallel)]
    out = {"command": "python -m scripts.bench_drive_rate " + " ".join(sys.argv[1:]), "runs": rows,
           "machine": {"cpu_count": os.cpu_count(), "load_avg_start": load, "load_avg_end": list(os.getloadavg())}}
    for r in rows:
        print(json.dumps(r))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
