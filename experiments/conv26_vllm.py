"""Table 1 on all of conv-26 through vLLM against the committed local runs (issue 46): per method the
paired F1 test (vLLM - local), the seconds on each side, and how busy the run kept the engine.

    python -m experiments.conv26_vllm results/served/conv26_vllm/runs \
        --local results/embedded/conv26_full/runs/table1 > results/served/conv26_vllm/comparison.md

Both folders hold one run directory per method, named as the method (scgmem, amem, ...). Per method:

- F1 of each run and the stratified paired bootstrap of vLLM - local over the questions both answered
  (scgmem/report/paired.py, 10,000 resamples, seed 0), with Holm's adjustment over the methods compared;
- seconds: summary.json `timing` ingest_s + answer_s on each side (model loading excluded), and
  local / vLLM;
- the run's requests (requests.jsonl, or requests.jsonl.gz as packaged; `model.record_requests=true`): count, tokens, mean in flight and
  the busy share of its span (scgmem/llm/served/request_profile.run_profile).

Spans (a method's, the whole table's) leave out pauses: stretches over PAUSE_S with no request in flight,
where the runs stopped (a crash, a restart) and were resumed; they are reported as paused seconds.

The last line is the whole table: summed local seconds against the vLLM runs' span (the first request's
start to the last one's end over all methods, which ran side by side on one server) and the issue's goal
(vLLM <= a quarter of the local sum). A method whose vLLM run has no summary.json yet is listed with the
questions answered so far and left out of the tests.
"""
from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from pathlib import Path

# a stretch this long with no request in flight is a pause (a crash and resume, a machine restart)
PAUSE_S = 600.0
ORDER = ("scgmem", "full_context", "rag", "rag_locomo", "memorybank", "readagent", "amem", "memgpt")


def seconds(run_dir: Path) -> float:
    path = run_dir / "summary.json"
    try:
        timing = json.loads(path.read_text())["timing"]
        return float(timing["ingest_s"]) + float(timing["answer_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: field timing.ingest_s/answer_s unreadable ({e})") from e


def answered(run_dir: Path) -> int:
    path = run_dir / "predictions.jsonl"
    return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.is_file() else 0


def requests(run_dir: Path) -> list[dict]:
    """The run's recorded requests (none when it has no record)."""
    from scgmem.llm.served.request_profile import read_records

    path, packed = run_dir / "requests.jsonl", run_dir / "requests.jsonl.gz"
    if path.is_file():
        return read_records(path)
    if not packed.is_file():
        return []
    with tempfile.TemporaryDirectory() as tmp:  # as experiments.conv26_package keeps it; read_records takes a path
        unpacked = Path(tmp) / "requests.jsonl"
        unpacked.write_bytes(gzip.decompress(packed.read_bytes()))
        return read_records(unpacked)


def compare(served_root: Path, local_root: Path) -> dict:
    from scgmem.report.collect import load_run
    from scgmem.report.paired import holm, paired_average

    from scgmem.llm.served.request_profile import run_profile

    rows, spans = [], []
    for method in ORDER:
        served, local = served_root / method, local_root / method
        if not served.is_dir():
            continue
        records = requests(served)
        profile = run_profile(records, pause_s=PAUSE_S) if records else None
        spans += [{"start": r["start"], "end": r["end"]} for r in records]
        row = {"method": method, "requests": profile, "answered": answered(served)}
        if (served / "summary.json").is_file():
            a, b = load_run(served), load_run(local)
            row.update(f1_vllm=a.summary["average"]["f1"], f1_local=b.summary["average"]["f1"],
                       paired=paired_average(a, b), s_vllm=seconds(served), s_local=seconds(local))
        rows.append(row)
    tested = [r for r in rows if "paired" in r]
    for r, p in zip(tested, holm([r["paired"]["p_value"] for r in tested])):
        r["p_holm"] = p
    local_sum = sum(seconds(local_root / m) for m in ORDER if (local_root / m).is_dir())
    whole = run_profile(spans, pause_s=PAUSE_S) if spans else {}
    return {"rows": rows, "local_sum_s": local_sum, "vllm_span_s": whole.get("span_s"),
            "vllm_paused_s": whole.get("paused_s"),
            "vllm_sum_s": sum(r["s_vllm"] for r in tested), "finished": len(tested)}


def markdown(result: dict) -> str:
    out = ["| method | questions | F1 local | F1 vLLM | vLLM - local [95% CI] | p (Holm) | s local | s vLLM | local / vLLM "
           "| requests | mean in flight | busy share |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        q = r["requests"] or {}
        tail = (f"| {q.get('requests', '')} | {q.get('mean_in_flight', '')} | {q.get('busy_share', '')} |")
        if "paired" not in r:
            out.append(f"| {r['method']} | {r['answered']} so far (running) | | | | | | | | " + tail[2:])
            continue
        d = r["paired"]
        out.append(f"| {r['method']} | {d['n']} | {r['f1_local']:.2f} | {r['f1_vllm']:.2f} | {d['diff']:+.2f} "
                   f"[{d['ci_low']:+.2f}, {d['ci_high']:+.2f}] | {d['p_value']:.3f} ({r['p_holm']:.3f}) "
                   f"| {r['s_local']:,.0f} | {r['s_vllm']:,.0f} | {r['s_local'] / max(r['s_vllm'], 1e-9):.2f} " + tail)
    span = result["vllm_span_s"]
    out.append("")
    out.append(f"Local runs, summed ingest + answer seconds over {len(ORDER)} methods: {result['local_sum_s']:,.0f} s "
               f"(goal for vLLM: <= {result['local_sum_s'] / 4:,.0f} s). vLLM: {result['finished']} methods finished, "
               f"their summed seconds {result['vllm_sum_s']:,.0f} s; span of all vLLM requests "
               f"{'%s s' % format(span, ',.0f') if span is not None else 'n/a'} (methods side by side on one server; "
               f"{result['vllm_paused_s'] or 0:,.0f} s of pauses longer than {PAUSE_S:.0f} s with no request in "
               f"flight, restarts, left out).")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("served", type=Path, help="folder of the vLLM run directories, one per method")
    parser.add_argument("--local", type=Path, default=Path("results/embedded/conv26_full/runs/table1"))
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    result = compare(args.served, args.local)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
