"""Engine utilization: a run's own requests, replayed free and along their causal graph, against its tokens/s.

    python -m scripts.bench_replay <run_dir> [<run_dir> ...] --url http://127.0.0.1:8000 \
        [--concurrency 64] [--pause-s 60] [--local <local run_dir> ...] [--out results/bench/<timestamp>-engine.json]

Each run directory must hold requests.jsonl, written by a served run with `model.record_requests=true`
(scgmem/llm/served/recorder.py). For each:

- run tokens/s: the prompt + completion tokens of its requests over the span from the first request's
  start to the last one's end, resumed pauses left out (the gap before each new recording session, and
  any stretch over `--pause-s` with nothing in flight: scgmem/llm/served/request_profile.run_profile);
- free replay tokens/s: the same requests sent again at once, `--concurrency` in flight, none waiting for
  another (the most this engine does for this exact mix of prompts and outputs);
- engine utilization = run tokens/s / free replay tokens/s;
- the causal replay: each request is sent as soon as its recorded parents' replies are back, and waits on
  nothing else (the requests whose replies its job had seen: scgmem/llm/causal.py). It keeps the method's
  own chains of dependent requests and drops everything the harness adds: its time between requests, the
  batching front's step barrier, the in-flight limit. Hence, per method:
  `order_cap` = causal replay / free replay (what the method's chains allow at best), and
  `run_over_causal` = run / causal replay (what the harness keeps of that; 1 = it adds nothing);
- `critical_path`: the longest chain of dependent requests, in requests, tokens and the run's request seconds;
- with `--local`, the same method's run on the local backend: served / local seconds of ingest + answer;
- vLLM's /metrics counters read before and after the free replay, when the server has them.

The replay must not be served from the run's own prefix cache: every replayed body carries a fresh
`cache_salt` (vLLM's field), so the replay's requests share their prompt heads with each other, as the
run's did, but with nothing the run left in the cache. The run itself may have been served partly from
blocks that earlier runs left there, so an unsalted (warm) replay follows: `engine_utilization_warm`.
`--no-salt` sends only the unsalted replay. llama.cpp accepts `cache_salt` and ignores it: for such an
engine `bench(reset=...)` empties the cache before the free and the causal replay (the bench restarts its
llama.cpp server) and sends no salt.

The file is untrusted input (docs/validation.md): every field is checked before anything is sent
(request_profile.read_records), requests go only to `--url` (the file's `server` fields are never used, a
`path` can only name a path on that server), the file is opened without following a link or opening a
FIFO, and every wait is bounded by the requests' own deadline. Records without a causal graph (version 1)
get the free replay only. The JSON records the load average at start and end and the CPU's flags.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import re
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from scgmem.harness.safe_files import open_nofollow, read_json_file
from scgmem.harness.untrusted import StoredFileError
from scgmem.llm.served.http_client import JsonClient, parse_base_url
from scgmem.llm.served.recorder import reply_tokens
from scgmem.llm.served.request_profile import (BadRecord, critical_path, has_graph, parent_indices, read_records,
                                               run_profile)

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total", "prefix_cache_hits_total")
TIMEOUT_S, RETRIES = 600.0, 2  # per request; a causal replay's wait for any reply is bounded by their product


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


class Sender:
    """POSTs recorded bodies to one server root and counts the tokens the replies state."""

    def __init__(self, root: str, salt: str | None) -> None:
        self.root, self.salt = root, salt
        self.netloc = urllib.parse.urlsplit(root).netloc
        self.client = JsonClient(root, timeout_s=TIMEOUT_S, retries=RETRIES)

    def __call__(self, rec: dict) -> int:
        # the path was checked (request_profile.PATH); this keeps a future change from sending elsewhere
        if urllib.parse.urlsplit(self.root + rec["path"]).netloc != self.netloc:
            raise BadRecord(f"field path: {rec['path'][:60]!r} would leave {self.root}")
        body = {**rec["body"], "cache_salt": self.salt} if self.salt else rec["body"]
        p, c = reply_tokens(rec["body"], self.client.post(rec["path"], body))
        return (p if p is not None else rec.get("prompt_tokens") or 0) + \
            (c if c is not None else rec.get("completion_tokens") or 0)


def causal_order(records: list[dict], send: Callable[[dict], int], pool: ThreadPoolExecutor) -> list[int]:
    """Send each record once all its parents are back, and nothing else holds it: the tokens of each."""
    parents = parent_indices(records)
    waiting = [len(ps) for ps in parents]
    children: list[list[int]] = [[] for _ in records]
    for i, ps in enumerate(parents):
        for p in ps:
            children[p].append(i)
    done: queue.Queue = queue.Queue()
    counts: list[int | None] = [None] * len(records)

    def submit(i: int) -> None:
        pool.submit(send, records[i]).add_done_callback(lambda f, i=i: done.put((i, f)))

    for i in range(len(records)):
        if not waiting[i]:
            submit(i)
    for _ in records:  # the graph is acyclic with every parent present (read_records): all get sent
        try:  # bounded: a request gives up within its own deadline, every retry included
            i, future = done.get(timeout=TIMEOUT_S * (RETRIES + 1) + 60)
        except queue.Empty:
            raise TimeoutError("causal replay: no reply within a request's whole deadline") from None
        counts[i] = future.result()
        for child in children[i]:
            waiting[child] -= 1
            if not waiting[child]:
                submit(child)
    return counts


def replay(records: list[dict], root: str, concurrency: int, salt: str | None, causal: bool = False) -> dict:
    """Send every recorded body again to `root`, `concurrency` at once; tokens/s over the replay's
    wall time. `causal`: each waits for its recorded parents (`causal_order`) instead of nothing."""
    send = Sender(root, salt)
    before = None if causal else read_metrics(root)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        counts = causal_order(records, send, pool) if causal else list(pool.map(send, records))
    wall = time.perf_counter() - start
    after = None if causal else read_metrics(root)
    out = {"concurrency": concurrency, "cache_salt": salt, "wall_s": round(wall, 3), "tokens": sum(counts),
           "requests": len(records), "tokens_per_s": round(sum(counts) / max(wall, 1e-9), 2)}
    if before and after:
        out["server_metrics_delta"] = {k: after[k] - before.get(k, 0.0) for k in after}
    return out


def fail(line: str):
    """Bad input: one line, exit 2 (nothing was computed yet)."""
    print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


def load(run_dir: Path) -> list[dict]:
    path = run_dir / "requests.jsonl"
    try:
        records = read_records(path, lambda p: open_nofollow(p, "rb"))
    except FileNotFoundError:
        fail(f"{path}: missing; run with model.record_requests=true")
    except (BadRecord, StoredFileError, OSError) as e:  # a link, a FIFO, a bad field
        fail(str(e))
    if not records:
        fail(f"{path}: no requests recorded")
    return records


def ratio(a: float, b: float) -> float:
    return round(a / max(b, 1e-9), 4)


def bench(run_dir: Path, url: str, concurrency: int, salt: bool = True, causal: bool = True,
          reset: Callable[[], None] | None = None, pause_s: float | None = None,
          records: list[dict] | None = None) -> dict:
    """Profile, replays and ratios of one run directory (module docstring). `reset`: empties the
    engine's prompt cache, for an engine without `cache_salt`; called before the free and the causal
    replay, and then no salt is sent."""
    records = load(run_dir) if records is None else records
    run = run_profile(records, pause_s)
    salt = salt and reset is None
    cold = salt or reset is not None  # then a warm replay follows the cold one
    if reset:
        reset()
    again = replay(records, url, concurrency, f"replay-{time.time_ns()}" if salt else None)
    again["cold"] = cold
    out = {"run_dir": str(run_dir), "method": method_of(run_dir),
           "run": run, "replay": again, "engine_utilization": ratio(run["tokens_per_s"], again["tokens_per_s"])}
    if cold:
        warm = out["replay_warm"] = replay(records, url, concurrency, None)
        out["engine_utilization_warm"] = ratio(run["tokens_per_s"], warm["tokens_per_s"])
    if causal and has_graph(records):
        out["critical_path"] = critical_path(records)
        if reset:
            reset()
        kept = out["replay_causal"] = replay(records, url, concurrency,
                                             f"replay-causal-{time.time_ns()}" if salt else None, causal=True)
        out["order_cap"] = ratio(kept["tokens_per_s"], again["tokens_per_s"])
        out["run_over_causal"] = ratio(run["tokens_per_s"], kept["tokens_per_s"])
    elif causal:
        out["causal_skipped"] = "records of version 1 name no parents"
    return out


def method_of(run_dir: Path) -> str | None:
    """summary.json's method name, or None (no summary, or one that does not say)."""
    try:
        method = read_json_file(run_dir / "summary.json", 1 << 24).get("method")
    except (OSError, ValueError, AttributeError):
        return None
    return method if isinstance(method, str) else None


def run_seconds(run_dir: Path) -> float:
    """Ingest + answer seconds of a run (summary.json `timing`)."""
    try:
        timing = read_json_file(run_dir / "summary.json", 1 << 24)["timing"]
        seconds = float(timing["ingest_s"]) + float(timing["answer_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{run_dir / 'summary.json'}: field timing.ingest_s/answer_s: unreadable ({str(e)[:80]})")
    if not 0 <= seconds < 1e9:
        fail(f"{run_dir / 'summary.json'}: field timing: {seconds} s is not a run's duration")
    return seconds


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if not 0 < value < 1e9 or value != value:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--url", required=True, help="server root to replay against (never taken from the file)")
    ap.add_argument("--concurrency", type=positive(int), default=64)
    ap.add_argument("--pause-s", type=positive(float), default=60.0,
                    help="a stretch this long with nothing in flight is a pause of the run, not idle engine time")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--local", nargs="*", type=Path, default=[], help="local-backend run dirs of the same slice")
    ap.add_argument("--no-salt", action="store_true", help="send the bodies without a fresh cache_salt")
    ap.add_argument("--no-causal", action="store_true", help="skip the causal replay")
    args = ap.parse_args()
    try:
        url = parse_base_url(args.url, "--url").removesuffix("/v1")
    except ValueError as e:
        fail(str(e))
    loaded = [load(d) for d in args.run_dirs]  # every file checked before anything is sent
    local = {method_of(d): d for d in args.local}
    local_s = {m: run_seconds(d) for m, d in local.items()}
    load_start = list(os.getloadavg())
    results = [bench(d, url, args.concurrency, not args.no_salt, not args.no_causal, pause_s=args.pause_s,
                     records=records) for d, records in zip(args.run_dirs, loaded)]
    for r in results:
        if r["method"] in local:
            served_s, seconds = run_seconds(Path(r["run_dir"])), local_s[r["method"]]
            r["vs_local"] = {"local_run_dir": str(local[r["method"]]), "served_s": round(served_s, 2),
                             "local_s": round(seconds, 2), "served_over_local": round(served_s / max(seconds, 1e-9), 3)}
    flags = next((line.partition(":")[2].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), []) if Path("/proc/cpuinfo").is_file() else []
    out = {"command": "python -m scripts.bench_replay " + " ".join(sys.argv[1:]),
           "machine": {"cpu_count": os.cpu_count(), "cpu_flags": flags, "load_avg_start": load_start,
                       "load_avg_end": list(os.getloadavg())},
           "runs": results}
    for r in results:
        print(summary_line(r))
    path = args.out or ROOT / "results" / "bench" / f"{time.strftime('%Y%m%d-%H%M%S')}-engine.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
    print(f"wrote {path}")


def summary_line(r: dict) -> str:
    warm = f"(warm: {r['engine_utilization_warm']:.3f}) " if "replay_warm" in r else ""
    local = f"; served/local {r['vs_local']['served_over_local']}" if "vs_local" in r else ""
    order = ""
    if "order_cap" in r:
        cp = r["critical_path"]
        order = (f"; order cap {r['order_cap']:.3f}, run/causal replay {r['run_over_causal']:.3f}, critical path "
                 f"{cp['requests']} of {cp['total_requests']} requests, {cp['tokens']} tokens")
    return (f"{r['method'] or r['run_dir']}: run {r['run']['tokens_per_s']} tok/s, replay {r['replay']['tokens_per_s']}"
            f" tok/s, engine utilization {r['engine_utilization']:.3f} {warm}(mean in flight "
            f"{r['run']['mean_in_flight']}, busy {r['run']['busy_share']:.2f}){order}{local}")


if __name__ == "__main__":
    main()
