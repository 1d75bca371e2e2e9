"""Copy finished conv-26 runs into results/embedded/conv26_full/runs/<group>/<name>.

The chain (experiments/conv26_chain.sh) writes run directories and logs on scratch space; this
keeps what a reader needs to check a number (predictions, summary, run.json, the Hydra config, the
exported memory, the time report) and gzips the logs and a served run's requests.jsonl, so the committed tree stays small.

    python -m experiments.conv26_package RUNS_DIR fig3:k5 fig3:k10 table1:full_context ...

A run without summary.json (unfinished) is refused: it belongs under in_progress/.
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

DEST = Path("results/embedded/conv26_full/runs")
KEEP = ("predictions.jsonl", "summary.json", "run.json")


def package(src: Path, dest: Path, log: Path | None, time_report: Path | None) -> None:
    if not (src / "summary.json").is_file():
        raise SystemExit(f"{src}: no summary.json (the run has not finished)")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in KEEP:
        shutil.copy2(src / name, dest / name)
    for folder in (".hydra", "memory"):
        if (src / folder).is_dir():
            shutil.copytree(src / folder, dest / folder)
    if (src / "requests.jsonl").is_file():  # a served run's recorded requests (replayable), 30-40x smaller packed
        with (src / "requests.jsonl").open("rb") as raw, gzip.open(dest / "requests.jsonl.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
    for path in sorted(src.glob("*.log")) + ([log] if log and log.is_file() else []):
        with path.open("rb") as raw, gzip.open(dest / f"{path.name}.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
    for path in sorted(src.glob("*.log.gz")):  # logs of earlier, resumed attempts
        shutil.copy2(path, dest / f"earlier_{path.name}")
    if time_report and time_report.is_file():
        shutil.copy2(time_report, dest / "time.txt")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the chain's RUNS folder")
    parser.add_argument("items", nargs="+", help="GROUP:NAME, e.g. fig3:k10")
    parser.add_argument("--dest", type=Path, default=DEST)
    args = parser.parse_args(argv)
    for item in args.items:
        group, sep, name = item.partition(":")
        if not sep or not name:
            raise SystemExit(f"{item!r}: expected GROUP:NAME")
        package(args.runs / name, args.dest / group / name, args.runs / f"{name}.log", args.runs / f"{name}.time")
        print(f"{args.runs / name} -> {args.dest / group / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
