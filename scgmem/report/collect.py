"""Find and load finished runs: `summary.json` + `predictions.jsonl` + `.hydra/config.yaml`.

A run directory is any directory holding a `summary.json` (docs/architecture.md, "The
contract"). `scgmem-run -m` writes one per job under
`results/runs/multirun/<time>/<model>/<method>/<override_dirname>/` and a `multirun.yaml` at
`results/runs/multirun/<time>/`; `newest_sweep` picks the newest such directory launched with a
given `+experiment=<name>`.

    >>> runs = collect("results/runs/multirun/2026-12-02_11-00-00")   # doctest: +SKIP
    >>> runs[0].model, runs[0].method, runs[0].setting("k")           # doctest: +SKIP
    ('smollm2-135m', 'scgmem', 35)
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from scgmem.harness.checked_run import read_checked_run, read_yaml, stored_overrides

log = logging.getLogger(__name__)

SUMMARY = "summary.json"
PREDICTIONS = "predictions.jsonl"


class NoRunsError(FileNotFoundError):
    """No finished run (summary.json) where one was expected; str(e) names the place."""


@dataclass
class Run:
    """One finished run, read through `scgmem.harness.checked_run` (every file checked, every score
    recomputed from the records)."""

    run_dir: Path
    summary: dict
    config: dict = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    data_checked: bool = True  # records checked against the data file (`read_checked_run`)

    @property
    def caveats(self) -> list[str]:
        """What a table built from this run must say beside its numbers: a partial merge of question
        shards, and references that were not checked against the data file (only against themselves)."""
        out = []
        partial = self.summary.get("partial")
        if partial:
            why = partial.get("why") if isinstance(partial, dict) else partial
            out.append(f"{shown_path(self.run_dir)}: partial, not the whole slice ({str(why)[:300]})")
        if not self.data_checked:
            out.append(f"{shown_path(self.run_dir)}: references not checked against the data file (not found); "
                       "its scores use the records' own references")
        return out

    @property
    def model(self) -> str:
        return str(self.summary["model"])

    @property
    def method(self) -> str:
        return str(self.summary["method"])

    @property
    def categories(self) -> list[str]:
        """Category column names in the summary's order, e.g. ["multi_hop", ..., "adversarial"]."""
        return list(self.summary["categories"])

    @property
    def category_mapping(self) -> dict[int, str]:
        """LoCoMo category number -> column name, as the run scored them."""
        mapping = self.summary.get("category_mapping") or {}
        return {int(k): str(v) for k, v in mapping.items()}

    @property
    def experiment(self) -> str | None:
        """The `+experiment=<name>` the run was launched with (None for a hand-typed run)."""
        return _experiment_of(self.overrides)

    def setting(self, key: str, default=None):
        """A method setting from the run's config (e.g. "k", "hops", "constraint")."""
        return (self.config.get("method") or {}).get(key, default)

    @cached_property
    def judge(self) -> dict[tuple[str, int], float]:
        """(sample_id, qa_index) -> share of the LLM judge's runs that said CORRECT, from the run's
        judgements.jsonl (`scgmem-report judge` or protocol.judge); {} when it was not judged."""
        from scgmem.harness.judging import judged_fraction

        return judged_fraction(self.run_dir)


def shown_path(path: str | Path) -> str:
    """`path` as written into reports: relative to the working directory (the repository, for
    `make` and the docs' commands) when it lies below it, so committed tables name no machine's
    folders; as given otherwise."""
    resolved, here = Path(path).resolve(), Path.cwd().resolve()
    return str(resolved.relative_to(here)) if resolved.is_relative_to(here) else str(path)


def load_run(run_dir: str | Path, data_path: str | Path | None = None) -> Run:
    """Read one run directory through the resume's checks (`read_checked_run`): records that do not
    recompute, a summary that is not their aggregate, a special file or a planted link are one line
    (StoredFileError). `data_path`: the data file to check the questions against (default: the
    run's data.path, when present)."""
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY
    if not os.path.lexists(path):
        raise NoRunsError(f"{path}: no summary.json (is the run finished?)")
    checked = read_checked_run(run_dir, data_path)
    return Run(run_dir=run_dir, summary=checked.summary, config=checked.config, overrides=checked.overrides,
               records=checked.records, data_checked=checked.data_checked)


def find_run_dirs(root: str | Path) -> list[Path]:
    """Every directory under `root` (or `root` itself) that holds a summary.json, sorted."""
    root = Path(root)
    if not root.exists():
        raise NoRunsError(f"{root}: no such directory")
    return sorted(p.parent for p in root.rglob(SUMMARY))


def collect(root: str | Path) -> list[Run]:
    """All runs under `root`. Raises NoRunsError if there is none."""
    dirs = find_run_dirs(root)
    if not dirs:
        raise NoRunsError(f"{root}: no run directories (no summary.json below it)")
    return [load_run(d) for d in dirs]


def _experiment_of(overrides) -> str | None:
    for item in overrides:
        key, _, value = str(item).partition("=")
        if key.lstrip("+~") == "experiment":
            return value
    return None


def caveats(runs) -> list[str]:
    """Every run's `Run.caveats`, for a table's notes."""
    return [c for run in runs for c in run.caveats]


def collect_all(roots) -> list[Run]:
    """The runs under every root of `roots` (several sweeps), each run directory once."""
    runs, seen = [], set()
    for root in roots:
        for run in collect(root):
            if run.run_dir.resolve() not in seen:
                seen.add(run.run_dir.resolve())
                runs.append(run)
    return runs


def for_experiment(runs: list[Run], experiment: str) -> list[Run]:
    """The runs of `experiment`: those launched with `+experiment=<experiment>` and hand-typed
    ones; a run of another experiment (a Figure 3 point, a Table 2 ablation) is left out, so it
    never stands in a cell of this one. Raises NoRunsError when none is left."""
    kept = [r for r in runs if r.experiment in (None, experiment)]
    others = sorted({r.experiment for r in runs if r.experiment not in (None, experiment)})
    if others:
        log.info("%s: leaving out %d runs of other experiments (%s)", experiment, len(runs) - len(kept),
                 ", ".join(others))
    if not kept:
        raise NoRunsError(f"no run of +experiment={experiment} among the {len(runs)} runs given "
                          f"(they are runs of {', '.join(others)})")
    return kept


def _sweep_experiment(sweep_dir: Path) -> str | None:
    """The `+experiment=<name>` a sweep was launched with, from multirun.yaml or a job's overrides."""
    candidates = []
    multirun = sweep_dir / "multirun.yaml"
    if multirun.is_file():  # read as plain data: no interpolation resolved (read_yaml)
        cfg = read_yaml(multirun)
        task = ((cfg.get("hydra") or {}).get("overrides") or {}).get("task") if isinstance(cfg, dict) else None
        candidates = [str(t) for t in task] if isinstance(task, list) else []
    else:
        for overrides in sorted(sweep_dir.rglob(".hydra/overrides.yaml"))[:1]:
            candidates = stored_overrides(overrides.parent.parent)
    return _experiment_of(candidates)


def _launched(sweep: Path) -> tuple[float, str]:
    """When a sweep was last launched (multirun.yaml is rewritten at each launch, so a resumed
    stable sweep such as multirun/table1 counts from its last launch), then its name."""
    stamp = sweep / "multirun.yaml"
    return ((stamp if stamp.is_file() else sweep).stat().st_mtime, sweep.name)


def newest_sweep(runs_root: str | Path, experiment: str) -> Path:
    """The newest `<runs_root>/multirun/<time>/` launched with `+experiment=<experiment>`
    that holds at least one finished run: the one launched last (`_launched`), whether named by
    its time (Hydra's default) or stable (`make reproduce-* `'s multirun/<experiment>, SWEEP=<dir>)."""
    base = Path(runs_root) / "multirun"
    if not base.is_dir():
        raise NoRunsError(f"{base}: no multirun directory; run `make reproduce-{experiment}` first "
                          "or pass --runs <dir>")
    for sweep in sorted((p for p in base.iterdir() if p.is_dir()), key=_launched, reverse=True):
        if _sweep_experiment(sweep) == experiment and any(sweep.rglob(SUMMARY)):
            return sweep
    raise NoRunsError(f"{base}: no finished sweep of +experiment={experiment}; run "
                      f"`make reproduce-{experiment}` first or pass --runs <dir>")


class RunConflict(ValueError):
    """Two runs claim the same table cell or figure point; str(e) names both folders."""


def index_runs(runs: list[Run], key) -> dict:
    """{key(run): run}. Two runs with the same key are an error naming both folders and the
    settings they differ in (a silent choice would put an arbitrary run in the table)."""
    from scgmem.harness.rundir import comparable_settings

    out: dict = {}
    for run in sorted(runs, key=lambda r: str(r.run_dir)):
        k = key(run)
        if k in out:
            a, b = comparable_settings(out[k].config), comparable_settings(run.config)
            diffs = [f"{n}: {a.get(n)!r} vs {b.get(n)!r}" for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
            differ = f"they differ in {'; '.join(diffs[:3])}{' ...' if len(diffs) > 3 else ''}" if diffs \
                else "same settings"
            raise RunConflict(f"two runs for {k}: {out[k].run_dir} and {run.run_dir} ({differ}); "
                              "pass --runs for the one you mean, or move the other away")
        out[k] = run
    return out
