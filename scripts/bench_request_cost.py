"""The non-model cost of a served request, by call kind (issue 57, item 2), on SCG-Mem's recorded requests.

    .venv/bin/python -m scripts.bench_request_cost [--sample 200] [--out results/bench/<timestamp>-request-cost.json]

Input: SCG-Mem's requests on all of conv-26 through vLLM (results/served/conv26_vllm/runs/table1/scgmem/
requests.jsonl.gz: the full schema as the embedded model built it, 6,402 requests). Per call kind (free
text, constrained continuation, next tokens = a greedy key step or beam expansion, score):
- JSON bytes of the request body, and of the grammar text a constrained request carries;
- grammar reuse: how many constrained requests carry a grammar identical to an earlier one (the engine
  could reuse its compiled form), and whether they follow each other (one turn's keys);
- llguidance's compile time of the largest distinct grammars with Qwen2.5's 151,936-token vocabulary
  (and SmolLM2's 49,152 for comparison): the work vLLM's guidance backend does per constrained request;
- client CPU per request: the recorded body sent through the harness's own JsonClient to a server in a
  child process that answers at once (CPU seconds of this process per request: JSON encoding, HTTP, the
  reply's parsing), and that server's CPU per request (a floor for any server's HTTP + JSON work).
It does not include the harness's work before the request (building prompts and the grammar text:
measured in issue 57 at 1.3 ms per key grammar) nor the engine's scheduling and masks.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from scripts.gpu_estimate import RUNS, call_kind

ROOT = Path(__file__).resolve().parents[1]
SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
REPLY = json.dumps({"choices": [{"index": 0, "text": "x", "finish_reason": "stop", "logprobs": None}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(REPLY))); self.end_headers(); self.wfile.write(REPLY)
s = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("up", flush=True); s.serve_forever()
'''


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def grammar_of(body: dict) -> str | None:
    so = body.get("structured_outputs")
    return so.get("grammar") if isinstance(so, dict) else body.get("guided_grammar")


def compile_times(grammars: list[str]) -> dict:
    import llguidance
    import llguidance.hf
    from transformers import AutoTokenizer

    from scgmem.llm.doubles.real_tokenizers import tokenizer_dir
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir

    out = {}
    for name, folder in (("qwen2.5 (151,936)", tokenizer_dir("qwen2.5")), ("smollm2 (49,152)", resolve_model_dir(None, **EMBEDDED))):
        tok = llguidance.hf.from_tokenizer(AutoTokenizer.from_pretrained(folder))
        times = []
        for g in grammars:
            spec = llguidance.grammar_from("lark", g)
            start = time.perf_counter()
            llguidance.LLMatcher(tok, spec)
            times.append(time.perf_counter() - start)
        out[name] = {"grammars": len(times), "median_ms": round(1e3 * statistics.median(times), 3),
                     "max_ms": round(1e3 * max(times), 3)}
    return out


def client_cost(records: list[dict], sample: int, port: int) -> dict:
    from scgmem.llm.served.http_client import JsonClient

    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        client = JsonClient(f"http://127.0.0.1:{port}", timeout_s=30, retries=0)
        by_kind = defaultdict(list)
        for r in records:
            by_kind[call_kind(r["body"])].append(r)
        out = {}
        for kind, recs in sorted(by_kind.items()):
            recs = recs[:: max(1, len(recs) // sample)][:sample]
            server0, cpu0, wall0 = cpu_of(proc.pid), time.process_time(), time.perf_counter()
            for r in recs:
                client.post(r["path"], r["body"])
            n = len(recs)
            out[kind] = {"requests": n, "client_cpu_ms": round(1e3 * (time.process_time() - cpu0) / n, 3),
                         "server_cpu_ms": round(1e3 * (cpu_of(proc.pid) - server0) / n, 3),
                         "round_trip_ms": round(1e3 * (time.perf_counter() - wall0) / n, 3)}
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=200, help="requests per kind sent to the instant server")
    ap.add_argument("--port", type=int, default=18230)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with gzip.open(RUNS / "scgmem" / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    load = list(os.getloadavg())
    kinds = defaultdict(list)
    for r in records:
        kinds[call_kind(r["body"])].append(len(json.dumps(r["body"], separators=(",", ":"))))
    sizes = {k: {"requests": len(v), "json_bytes_median": int(statistics.median(v)), "json_bytes_max": max(v)}
             for k, v in sorted(kinds.items())}
    grammars = [grammar_of(r["body"]) for r in records if grammar_of(r["body"])]
    counts = Counter(grammars)
    repeats_in_a_row = sum(1 for a, b in zip(grammars, grammars[1:]) if a == b)
    reuse = {"constrained_requests": len(grammars), "distinct_grammars": len(counts),
             "repeating_an_earlier_grammar": len(grammars) - len(counts),
             "same_as_the_previous_constrained_request": repeats_in_a_row,
             "grammar_bytes_median": int(statistics.median(len(g) for g in grammars)),
             "grammar_bytes_max": max(len(g) for g in grammars)}
    largest = sorted(counts, key=len)[-20:]
    out = {"command": "python -m scripts.bench_request_cost " + " ".join(sys.argv[1:]),
           "input": str((RUNS / "scgmem" / "requests.jsonl.gz").relative_to(ROOT)), "json_sizes": sizes,
           "grammar_reuse": reuse, "compile_largest_20": compile_times(largest),
           "client_and_server_cpu": client_cost(records, args.sample, args.port),
           "machine": {"cpu_count": os.cpu_count(), "load_avg_start": load, "load_avg_end": list(os.getloadavg())}}
    print(json.dumps(out, indent=1))
    path = args.out or ROOT / "results" / "bench" / f"{time.strftime('%Y%m%d-%H%M%S')}-request-cost.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
