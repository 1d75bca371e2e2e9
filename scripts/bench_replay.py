"""Engine utilization: a run's own requests, replayed with no dependencies, against its tokens/s.

    python -m scripts.bench_replay <run_dir> [<run_dir> ...] [--url http://127.0.0.1:8000] \
        [--concurrency 64] [--local <local run_dir> ...] [--out results/bench/<timestamp>-engine.json]

Each run directory must hold requests.jsonl, written by a served run with `model.record_requests=true`
(scgmem/llm/served/recorder.py). For each:

- run tokens/s: the prompt + completion tokens of its requests over the span from the first request's
  start to the last one's end (the engine's work over the time the run kept it);
- replay tokens/s: the same requests sent again at once, `--concurrency` in flight, none waiting for
  another (the most this engine does for this exact mix of prompts and outputs: the replay bound);
- engine utilization = run tokens/s / replay tokens/s;
- the cap the run's own order sets: mean requests in flight during the run, and the share of its span
  with at least one request in flight;
- with `--local`, the same method's run on the local backend: served / local seconds of ingest + answer
  (summary.json `timing`; model loading excluded);
- the cap the run's order sets, measured: an *ordered* replay sends each request only once every request
  that had ended before it started in the run has ended again (the run's happens-before, as recorded:
  a request sent after another's reply may have needed it). It keeps the run's chains of dependent
  requests and drops only the harness's own time between them (prompt building, embedding, trie
  updates, Python). `order_cap` = ordered replay tokens/s / free replay tokens/s (the utilization the
  method's order allows at best); `within_order` = run tokens/s / ordered replay tokens/s (the share of
  that the harness reaches); their product is about the engine utilization. The ordered replay takes
  about as long as the run's engine time: `--no-ordered` skips it;
- vLLM's /metrics counters (prompt_tokens_total, generation_tokens_total, prefix_cache_queries_total,
  prefix_cache_hits_total) read before and after the replay, when the server has them.

The replay must not be served from the run's own prefix cache: every replayed body carries a fresh
`cache_salt` (vLLM's field; a salted request shares cached blocks only with requests of the same salt),
so the replay's requests share their prompt heads with each other, as the run's did, but with nothing
the run left in the cache. The run itself may have been served partly from blocks that earlier runs of
the same prompts left there (vLLM cannot be told to drop its cache without its dev mode), so a second,
unsalted replay follows: `engine_utilization` is run / salted replay, `engine_utilization_warm` run /
unsalted replay (the prompts as cached as they can be: a lower bound). `--no-salt` sends only the
unsalted replay (an engine that refuses the field).

llama.cpp accepts `cache_salt` and ignores it: its slots keep the run's prompts, and a replay there
reads them from cache (measured: RAG's two requests replayed 10x faster than the run). For such an
engine `bench(reset=...)` empties the cache before the free and the ordered replay (the bench
restarts its llama.cpp server) and sends no salt: both replays start cold, as a salted one does on
vLLM, and the warm replay follows the free one.

Token counts are those the replies state (the recorder's fields; a reply without usage counts the ids
sent). The JSON records the load average at start and end and the CPU's flags: on a shared machine the
numbers are noisy, and the load average says how much.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from scgmem.llm.served.http_client import JsonClient
from scgmem.llm.served.recorder import read_records, reply_tokens

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total", "prefix_cache_hits_total")


def tokens(rec: dict) -> int:
    return int(rec.get("prompt_tokens") or 0) + int(rec.get("completion_tokens") or 0)


def run_profile(records: list[dict], pause_s: float | None = None) -> dict:
    """Tokens/s of the run as recorded, and how many of its requests were in flight.

    `pause_s`: a stretch longer than this with no request in flight is a pause of the run (a crash and
    its resume, a machine restart), not engine time it left idle; such stretches are cut out of the
    span and reported as `paused_s`. None keeps the whole span (the bench's runs never pause)."""
    start, end = min(r["start"] for r in records), max(r["end"] for r in records)
    busy, paused, last = 0.0, 0.0, start  # union of the request intervals; the pauses between them
    for r in sorted(records, key=lambda r: r["start"]):
        if pause_s is not None and r["start"] - last > pause_s:
            paused += r["start"] - last
        if r["end"] > last:
            busy += r["end"] - max(r["start"], last)
            last = r["end"]
    span = max(end - start - paused, 1e-9)
    total = sum(tokens(r) for r in records)
    out = {"requests": len(records), "tokens": total,
           "prompt_tokens": sum(int(r.get("prompt_tokens") or 0) for r in records),
           "completion_tokens": sum(int(r.get("completion_tokens") or 0) for r in records),
           "span_s": round(span, 3), "tokens_per_s": round(total / span, 2),
           "mean_in_flight": round(sum(r["end"] - r["start"] for r in records) / span, 3),
           "busy_share": round(busy / span, 4)}
    if pause_s is not None:
        out["paused_s"] = round(paused, 3)
    return out


def read_metrics(root: str) -> dict | None:
    """vLLM's token counters from <root>/metrics (summed over label sets), or None without them."""
    try:
        with urllib.request.urlopen(root + "/metrics", timeout=10) as f:
            text = f.read(8 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    out = {}
    for name in METRICS:
        values = re.findall(rf"^\S*{name}(?:{{[^}}]*}})?\s+([0-9.eE+-]+)$", text, flags=re.M)
        if values:
            out[name] = sum(float(v) for v in values)
    return out or None


def ordered_waits(records: list[dict]) -> tuple[list[dict], list[int], list[int]]:
    """The run's happens-before as prefix counts: records in start order; for each, how many records
    in end order (`end_rank`) must be done before it is sent (those that ended strictly before it
    started: all of them started before it, so sending in start order cannot deadlock)."""
    by_start = sorted(range(len(records)), key=lambda i: records[i]["start"])
    by_end = sorted(range(len(records)), key=lambda i: records[i]["end"])
    ends = [records[i]["end"] for i in by_end]
    end_rank = [0] * len(records)
    for rank, i in enumerate(by_end):
        end_rank[i] = rank
    return [records[i] for i in by_start], [end_rank[i] for i in by_start], \
        [bisect.bisect_left(ends, records[i]["start"]) for i in by_start]


def replay(records: list[dict], url: str | None, concurrency: int, salt: str | None,
           ordered: bool = False) -> dict:
    """Send every recorded body again, `concurrency` at once; tokens/s over the replay's wall time.
    `ordered`: keep the run's happens-before (`ordered_waits`) instead of sending all at once."""
    clients: dict[str, JsonClient] = {}

    def one(rec):
        root = url or rec["server"].rstrip("/").removesuffix("/v1")
        client = clients.setdefault(root, JsonClient(root, timeout_s=600, retries=2))
        reply = client.post(rec["path"], {**rec["body"], "cache_salt": salt} if salt else rec["body"])
        p, c = reply_tokens(rec["body"], reply)
        return (p if p is not None else int(rec.get("prompt_tokens") or 0)) + \
            (c if c is not None else int(rec.get("completion_tokens") or 0))

    root = url or records[0]["server"].rstrip("/").removesuffix("/v1")
    before = read_metrics(root)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        if not ordered:
            counts = list(pool.map(one, records))
        else:
            in_start_order, ranks, waits = ordered_waits(records)
            done, frontier, cond = [False] * len(records), [0], threading.Condition()

            def finish(rank: int, _future) -> None:
                with cond:
                    done[rank] = True
                    while frontier[0] < len(done) and done[frontier[0]]:
                        frontier[0] += 1
                    cond.notify_all()

            futures = []
            for rec, rank, wait in zip(in_start_order, ranks, waits):
                with cond:
                    cond.wait_for(lambda: frontier[0] >= wait)
                futures.append(pool.submit(one, rec))
                futures[-1].add_done_callback(lambda f, rank=rank: finish(rank, f))
            counts = [f.result() for f in futures]
    wall = time.perf_counter() - start
    after = read_metrics(root)
    out = {"concurrency": concurrency, "cache_salt": salt, "wall_s": round(wall, 3), "tokens": sum(counts),
           "tokens_per_s": round(sum(counts) / max(wall, 1e-9), 2)}
    if before and after:
        out["server_metrics_delta"] = {k: after[k] - before.get(k, 0.0) for k in after}
    return out


def run_seconds(run_dir: Path) -> float:
    """Ingest + answer seconds of a run (summary.json `timing`)."""
    timing = json.loads((run_dir / "summary.json").read_text())["timing"]
    return float(timing["ingest_s"]) + float(timing["answer_s"])


def bench(run_dir: Path, url: str | None, concurrency: int, salt: bool = True, ordered: bool = True,
          reset: Callable[[], None] | None = None) -> dict:
    """Profile, replays and ratios of one run directory (module docstring). `reset`: empties the
    engine's prompt cache, for an engine without `cache_salt`; called before the free and the ordered
    replay, and then no salt is sent."""
    path = run_dir / "requests.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: missing; run with model.record_requests=true")
    records = read_records(path)
    if not records:
        raise SystemExit(f"{path}: no requests recorded")
    run = run_profile(records)
    salt = salt and reset is None
    cold = salt or reset is not None  # then a warm replay follows the cold one
    if reset:
        reset()
    again = replay(records, url, concurrency, f"replay-{time.time_ns()}" if salt else None)
    again["cold"] = cold
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    out = {"run_dir": str(run_dir), "method": summary.get("method"), "run": run, "replay": again,
           "engine_utilization": round(run["tokens_per_s"] / max(again["tokens_per_s"], 1e-9), 4)}
    if cold:
        warm = out["replay_warm"] = replay(records, url, concurrency, None)
        out["engine_utilization_warm"] = round(run["tokens_per_s"] / max(warm["tokens_per_s"], 1e-9), 4)
    if ordered:
        if reset:
            reset()
        kept = out["replay_ordered"] = replay(records, url, concurrency,
                                              f"replay-ordered-{time.time_ns()}" if salt else None, ordered=True)
        out["order_cap"] = round(kept["tokens_per_s"] / max(again["tokens_per_s"], 1e-9), 4)
        out["within_order"] = round(run["tokens_per_s"] / max(kept["tokens_per_s"], 1e-9), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--url", default=None, help="server root to replay against (default: the recorded one)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--local", nargs="*", type=Path, default=[], help="local-backend run dirs of the same slice")
    ap.add_argument("--no-salt", action="store_true", help="send the bodies without a fresh cache_salt")
    ap.add_argument("--no-ordered", action="store_true", help="skip the ordered replay (the cap of the run's order)")
    args = ap.parse_args()
    if args.concurrency < 1:
        raise SystemExit(f"--concurrency must be >= 1, got {args.concurrency}")
    load_start = list(os.getloadavg())
    results = [bench(d, args.url and args.url.rstrip("/").removesuffix("/v1"), args.concurrency, not args.no_salt,
                     not args.no_ordered) for d in args.run_dirs]
    local = {json.loads((d / "summary.json").read_text())["method"]: d for d in args.local}
    for r in results:
        if r["method"] in local:
            served_s, local_s = run_seconds(Path(r["run_dir"])), run_seconds(local[r["method"]])
            r["vs_local"] = {"local_run_dir": str(local[r["method"]]), "served_s": round(served_s, 2),
                             "local_s": round(local_s, 2), "served_over_local": round(served_s / max(local_s, 1e-9), 3)}
    flags = next((line.partition(":")[2].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), []) if Path("/proc/cpuinfo").is_file() else []
    out = {"command": "python -m scripts.bench_replay " + " ".join(sys.argv[1:]),
           "machine": {"cpu_count": os.cpu_count(), "cpu_flags": flags, "load_avg_start": load_start,
                       "load_avg_end": list(os.getloadavg())},
           "runs": results}
    for r in results:
        warm = (f"(warm replay {r['replay_warm']['tokens_per_s']} tok/s: {r['engine_utilization_warm']:.3f}) "
                if "replay_warm" in r else "")
        local = f"; served/local {r['vs_local']['served_over_local']}" if "vs_local" in r else ""
        order = (f"; order cap {r['order_cap']:.3f}, run/ordered replay {r['within_order']:.3f}"
                 if "order_cap" in r else "")
        print(f"{r['method'] or r['run_dir']}: run {r['run']['tokens_per_s']} tok/s, replay "
              f"{r['replay']['tokens_per_s']} tok/s, engine utilization {r['engine_utilization']:.3f} {warm}"
              f"(mean in flight {r['run']['mean_in_flight']}, busy {r['run']['busy_share']:.2f}){order}{local}")
    path = args.out or ROOT / "results" / "bench" / f"{time.strftime('%Y%m%d-%H%M%S')}-engine.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
