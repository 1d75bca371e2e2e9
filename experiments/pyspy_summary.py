"""Where a profiled run spent its time: top frames of a py-spy `--format raw` (collapsed stacks) file.

    .venv/bin/py-spy record --nonblocking --rate 20 --format raw -o prof.raw -- .venv/bin/scgmem-run ...
    .venv/bin/python -m experiments.pyspy_summary prof.raw [--top 25] [--json out.json] \
        [--group ingest=SCGMem.ingest --group recall=constrained_beam_search ...]

Self time: samples whose innermost Python frame is the function (time in C code called from it
counts there: a torch op's time lands on the Python line that called it). Total time: samples with
the function anywhere on the stack. Frames are keyed by function and file, line numbers dropped.
Groups: each sample goes to the first group whose text occurs in one of its frames (else "rest").
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frame_key(frame: str) -> str:
    """'forward (torch/nn/modules/linear.py:134)' -> 'forward (torch/nn/modules/linear.py)', the
    site-packages prefix dropped."""
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = re.sub(r"^.*(site-packages|lib/python3\.\d+)/", "", match["file"])
    path = re.sub(r"^/work/main/", "", path)
    return f"{match['func']} ({path})"


def summarize(lines: list[str], groups: list[tuple[str, str]] = ()) -> dict:
    group_counts: Counter[str] = Counter()
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    samples = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        entries = stack.split(";")
        if entries[0].startswith(("process ", "thread (0x")):  # --threads / --subprocesses name them first
            entries = entries[1:]
        frames = [frame_key(f) for f in entries]
        if not frames:
            continue
        samples += n
        self_counts[frames[-1]] += n
        for key in set(frames):
            total_counts[key] += n
        if groups:
            group_counts[next((name for name, text in groups if any(text in f for f in frames)), "rest")] += n
    return {"samples": samples, "self": self_counts, "total": total_counts, "groups": group_counts}


def table(counts: Counter, samples: int, top: int, title: str) -> str:
    rows = [f"| {title} | samples | share |", "|---|---:|---:|"]
    rows += [f"| `{k}` | {v} | {100 * v / samples:.1f}% |" for k, v in counts.most_common(top)]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="py-spy --format raw output (may be gzipped: .gz)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", type=Path, help="also write the top frames as JSON")
    parser.add_argument("--group", action="append", default=[], metavar="NAME=TEXT",
                        help="count samples with TEXT in a frame under NAME (first match wins; repeatable)")
    args = parser.parse_args()
    if not args.raw.is_file():
        raise SystemExit(f"error: {args.raw}: no such profile file")
    groups = []
    for spec in args.group:
        name, sep, text = spec.partition("=")
        if not sep or not name or not text:
            raise SystemExit(f"error: --group {spec!r}: expected NAME=TEXT")
        groups.append((name, text))
    text = gzip.decompress(args.raw.read_bytes()).decode() if args.raw.suffix == ".gz" else args.raw.read_text()
    result = summarize(text.splitlines(), groups)
    samples = result["samples"]
    if not samples:
        raise SystemExit(f"error: {args.raw}: no samples (not a py-spy raw file?)")
    print(f"{samples} samples\n")
    print(table(result["self"], samples, args.top, "self (innermost Python frame)") + "\n")
    print(table(result["total"], samples, args.top, "total (anywhere on the stack)"))
    if groups:
        print("\n" + table(result["groups"], samples, len(groups) + 1, "group (first match)"))
    if args.json:
        args.json.write_text(json.dumps({"samples": samples, "self": result["self"].most_common(args.top),
                                         "total": result["total"].most_common(args.top),
                                         "groups": dict(result["groups"])}, indent=1))


if __name__ == "__main__":
    main()
