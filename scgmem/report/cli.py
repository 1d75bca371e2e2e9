"""`scgmem-report`: the paper's tables and figures from finished runs.

    scgmem-report table1                 # newest `-m +experiment=table1` sweep under results/runs/
    scgmem-report table2 --runs results/runs/multirun/2026-12-02_11-00-00
    scgmem-report table1 --runs SWEEP_A --runs SWEEP_B   # one table from two sweeps
    scgmem-report table1 --wandb my-project              # also log it to wandb project my-project
    scgmem-report fig3 --out results     # -> results/figures/fig3.{png,pdf,csv}
    scgmem-report all                    # each experiment's newest sweep; skips those never run
    scgmem-report merge --out DIR RUN_A RUN_B   # shards of one run (split by data.samples) -> one run
    scgmem-report rescore RUN_DIR --gold original --gold audited   # a run's answers under each gold
    scgmem-report judge RUN_DIR [--model M] [--runs N]   # LLM judge (J) on a finished run (report/judged.py)
    scgmem-report view --runs RUN [RUN ...] --out DIR      # a static site to browse answers (report/view/)

Tables go to <out>/tables/ (table1.md/.csv/.tex and table1_paired.csv), figures to
<out>/figures/. `table1` also draws the cost-vs-F1 chart of its runs. Exit code 2 with one
line on stderr when there is nothing to report (no runs, no paper CSV).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from scgmem.report.output import write_output
from scgmem.harness.untrusted import StoredFileError
from scgmem.report import figures, judged, tables, writers
from scgmem.report.collect import NoRunsError, collect, collect_all, for_experiment, newest_sweep, shown_path
from scgmem.report.paired import N_RESAMPLES
from scgmem.report.paper import PaperTable

log = logging.getLogger("scgmem.report")

EXPERIMENTS = ("table1", "table2", "fig3", "fig4")
HELP = {"table1": "Table 1 beside the paper, CIs, paired bootstrap; and the cost-vs-F1 chart",
        "table2": "Table 2 (SCG-Mem ablations) beside the paper",
        "fig3": "Figure 3: F1 and BLEU-1 per category against k",
        "fig4": "Figure 4: F1 and BLEU-1 per category by association hops",
        "all": "all of the above, each from its experiment's newest sweep",
        "merge": "merge the run directories of one command sharded by data.samples into one",
        "costs": "one row per run: scores, evidence recall, seconds, LLM calls and tokens, deviations",
        "rescore": "score a finished run's stored answers again under data.gold=original|audited (no rerun)",
        "view": "a static site (offline, file://) to see runs question by question, memories, two runs paired",
        "claims": "the paper's claims (Table 1, Table 2, Figures 3-4) as paired tests on runs of the same questions"}


def _runs_dirs(args, experiment: str) -> list[Path]:
    return [Path(d) for d in args.runs] if args.runs else [newest_sweep(args.runs_root, experiment)]


def report(experiment: str, args) -> dict[str, list[Path]]:
    """Make one experiment's outputs; returns {"tables": [...], "figures": [...]} paths."""
    dirs = _runs_dirs(args, experiment)
    runs = for_experiment(collect_all(dirs), experiment)
    runs_dir = ", ".join(shown_path(d) for d in dirs)
    out = Path(args.out)
    made: dict[str, list[Path]] = {"tables": [], "figures": []}
    data = [r.summary.get("data") or {} for r in runs]
    slices = sorted({f"samples={d.get('samples')}, max_sessions={d.get('max_sessions')}, "
                     f"questions_per_category={d.get('questions_per_category')}" for d in data})
    # Runs from before answer_format existed scored the reply as text.
    scoring = sorted({f"protocol={r.summary.get('protocol')}, answer_format="
                      f"{(r.summary.get('answer_format') or {}).get('format') or 'text'}" for r in runs})
    note = f"Runs: {runs_dir} ({len(runs)} run directories). Data: {'; '.join(slices)}. Scoring: {'; '.join(scoring)}."
    kw = {"n_resamples": args.n_resamples, "seed": args.seed}
    if experiment in ("table1", "table2"):
        paper = PaperTable(Path(args.paper) / f"{experiment}.csv", "method" if experiment == "table1" else "variant")
        build = tables.build_table1 if experiment == "table1" else tables.build_table2
        fallback = args.paper_model or ("llama3.2-1b" if experiment == "table1" else "qwen2.5-3b")
        table = build(runs, paper, default_paper_model=None if fallback == "none" else fallback, **kw)
        table.notes.append(note)
        made["tables"] = writers.write_table(table, out / "tables")
        if experiment == "table1":
            made["figures"] = figures.cost_vs_f1(runs, out / "figures", **kw)
    elif experiment == "fig3":
        made["figures"] = figures.figure3(runs, out / "figures", **kw)
    else:
        made["figures"] = figures.figure4(runs, out / "figures", **kw)
    if args.wandb:
        _log_wandb(experiment, made, out, args.wandb)
    return made


def _log_wandb(experiment: str, made: dict[str, list[Path]], out: Path, project: str) -> None:
    import csv

    from scgmem.harness.logger import WandbLogger

    rows = {}
    for path in made["tables"] + made["figures"]:
        if path.suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as f:
                rows[path.stem] = list(csv.DictReader(f))
    images = [p for p in made["figures"] if p.suffix == ".png"]
    WandbLogger(project=project).log_report(f"report/{experiment}", rows, images, out_dir=out)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scgmem-report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    costs = sub.add_parser("costs", help=HELP["costs"])
    costs.add_argument("--runs", action="append", required=True,
                       help="a directory holding runs (searched recursively); repeat for several")
    costs.add_argument("--out", default="results", help="the table goes to OUT/tables (default: %(default)s)")
    claims = sub.add_parser("claims", help=HELP["claims"])
    claims.add_argument("--runs", action="append", required=True,
                        help="a directory holding runs of one model on the same questions; repeat for several")
    claims.add_argument("--out", default="results", help="claims.md/.json go to OUT/tables (default: %(default)s)")
    claims.add_argument("--n-resamples", type=int, default=N_RESAMPLES, help="bootstrap resamples (default: %(default)s)")
    claims.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    rescore = sub.add_parser("rescore", help=HELP["rescore"])
    rescore.add_argument("run", help="a run directory (summary.json and predictions.jsonl)")
    rescore.add_argument("--gold", action="append", choices=("original", "audited"), required=True,
                         help="the gold to score against; repeat for a comparison")
    rescore.add_argument("--out", default=None, help="where to write (default: the run directory)")
    rescore.add_argument("--data", default=None, help="the LoCoMo file (default: the run's data.path)")
    rescore.add_argument("--n-resamples", type=int, default=N_RESAMPLES, help="bootstrap resamples (default: %(default)s)")
    rescore.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    merge = sub.add_parser("merge", help=HELP["merge"])
    merge.add_argument("runs", nargs="+", help="the shards' run directories (each holding summary.json)")
    merge.add_argument("--out", required=True, help="the new run directory (must not hold a run)")
    judged.add_parser(sub)
    view = sub.add_parser("view", help=HELP["view"])
    view.add_argument("--runs", nargs="+", required=True,
                      help="run directories or folders of runs (a sweep); each run directory holds summary.json")
    view.add_argument("--out", required=True, help="the site's folder (new, or one this command wrote); open OUT/index.html")
    view.add_argument("--data", default=None, help="the LoCoMo file for the turns' text (default: the runs' data.path)")
    view.add_argument("--judge", nargs="+", default=(), metavar="DIR",
                      help="folders `scgmem-report judge --out DIR` wrote for one of the runs (its labels shown)")
    view.add_argument("--serve", type=int, nargs="?", const=8600, default=None, metavar="PORT",
                      help="also serve the site on 127.0.0.1:PORT (default port %(const)s) until Ctrl-C")
    view.add_argument("--n-resamples", type=int, default=N_RESAMPLES, help="bootstrap resamples (default: %(default)s)")
    view.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    for name in (*EXPERIMENTS, "all"):
        s = sub.add_parser(name, help=HELP[name])
        if name != "all":
            s.add_argument("--runs", action="append", default=None,
                           help="directory holding runs (searched recursively for summary.json); repeat to "
                                "combine sweeps (two runs for one cell are an error naming both); default: "
                                f"the newest `-m +experiment={name}` sweep under --runs-root")
        s.add_argument("--runs-root", default="results/runs", help="where scgmem-run writes (default: %(default)s)")
        s.add_argument("--out", default="results", help="tables go to OUT/tables, figures to OUT/figures "
                                                        "(default: %(default)s)")
        s.add_argument("--paper", default="results/paper", help="directory of the paper CSVs (default: %(default)s)")
        s.add_argument("--paper-model", default=None,
                       help="paper model beside a model the paper did not run (default: llama3.2-1b for table1, "
                            "qwen2.5-3b for table2; 'none' for no paper column)")
        s.add_argument("--n-resamples", type=int, default=N_RESAMPLES, help="bootstrap resamples (default: %(default)s)")
        s.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
        s.add_argument("--wandb", nargs="?", const="scgmem", default=None, metavar="PROJECT",
                       help="also log the tables and figures to wandb project PROJECT (default: scgmem; "
                            "offline unless WANDB_MODE says otherwise)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _command(args, argv)
    except StoredFileError as e:  # a run file that is not what scgmem-run writes, a link or FIFO at an output
        print(f"error: {args.command}: {e}", file=sys.stderr)
        return 2


def _command(args, argv: list[str] | None) -> int:
    if args.command == "merge":
        from scgmem.report.merge import MergeError, merge_runs
        try:
            print(merge_runs([Path(d) for d in args.runs], Path(args.out)))
        except MergeError as e:
            print(f"error: merge: {e}", file=sys.stderr)
            return 2
        return 0
    if args.command == "costs":
        from scgmem.report.costs import write_costs
        try:
            runs = [run for d in args.runs for run in collect(d)]
            paths = write_costs(runs, Path(args.out) / "tables")
        except (NoRunsError, ValueError) as e:
            print(f"error: costs: {e}", file=sys.stderr)
            return 2
        for path in paths:
            print(path)
        return 0
    if args.command == "claims":
        return _claims(args)
    if args.command == "rescore":
        return _rescore(args, argv)
    if args.command == "judge":
        return _judge(args)
    if args.command == "view":
        return _view(args)
    experiments = EXPERIMENTS if args.command == "all" else (args.command,)
    if args.command == "all":
        args.runs = None
    status = 0
    for experiment in experiments:
        try:
            made = report(experiment, args)
        except (NoRunsError, FileNotFoundError, ValueError) as e:
            if args.command == "all" and isinstance(e, NoRunsError):
                print(f"{experiment}: skipped ({e})", file=sys.stderr)
                continue
            print(f"error: {experiment}: {e}", file=sys.stderr)
            status = 2
            continue
        for path in made["tables"] + made["figures"]:
            print(path)
    return status


def _rescore(args, argv: list[str] | None) -> int:
    """`scgmem-report rescore`: rescored_<gold>.json/.jsonl and gold_comparison.md/.csv."""
    from scgmem.api.data_source import DataError
    from scgmem.report.collect import load_run
    from scgmem.report.rescore import write_rescored
    command = "scgmem-report " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        run = load_run(args.run, args.data)
        out = Path(args.out) if args.out else Path(args.run)
        paths = write_rescored(run, list(dict.fromkeys(args.gold)), out, command, args.data, args.n_resamples,
                               args.seed)
    except (NoRunsError, DataError, ValueError) as e:
        print(f"error: rescore: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def _view(args) -> int:
    """`scgmem-report view`: OUT/index.html and its data; with --serve, served until Ctrl-C."""
    from scgmem.api.data_source import DataError
    from scgmem.report.view import build_site, serve
    try:
        page = build_site(args.runs, args.out, args.data, n_resamples=args.n_resamples, seed=args.seed,
                          judges=args.judge)
    except (NoRunsError, DataError, ValueError) as e:
        print(f"error: view: {e}", file=sys.stderr)
        return 2
    print(page)
    if args.serve is not None:
        serve(page.parent, args.serve)
    return 0


def _judge(args) -> int:
    """`scgmem-report judge`: labels and judge_summary.json beside the run (or in --out)."""
    import json

    from scgmem.harness.judging import JudgeMismatch
    from scgmem.llm.loading import ModelFilesMissing
    try:
        path = judged.judge_command(args)
    except (NoRunsError, JudgeMismatch, ModelFilesMissing, ValueError) as e:
        print(f"error: judge: {e}", file=sys.stderr)
        return 2
    for line in judged.summary_lines(json.loads(path.read_text(encoding="utf-8"))):
        print(line)
    print(path)
    return 0


def _claims(args) -> int:
    """`scgmem-report claims`: OUT/tables/claims.md and claims.json."""
    import json

    from scgmem.report.claims import claims_markdown, paper_claims
    try:
        runs = [run for d in args.runs for run in collect(d)]
        found = paper_claims(runs, n_resamples=args.n_resamples, seed=args.seed)
    except (NoRunsError, ValueError) as e:
        print(f"error: claims: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    note = (f"Runs: {', '.join(shown_path(d) for d in args.runs)} ({len(runs)} run directories, model "
            f"{runs[0].model}); {args.n_resamples} resamples, seed {args.seed}.")
    write_output(out / "claims.md", claims_markdown(found, note))
    write_output(out / "claims.json", json.dumps([c.__dict__ for c in found], indent=2) + "\n")
    for name in ("claims.md", "claims.json"):
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
