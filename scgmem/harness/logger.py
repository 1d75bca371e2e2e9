"""Experiment tracking: `logger=none` (default, `NullLogger`) tracks nothing; `logger=wandb`
(`WandbLogger`) tracks runs in Weights & Biases.

The runner calls `start(config, run_dir, name)` before answering, `log_progress(metrics)` after every
memory built and every chunk of questions answered (`progress_metrics`: questions answered, the
running F1 and BLEU-1, tokens so far), `log_run(config, summary, run_dir)` after summary.json is
written, and `abort()` when the run stops on an error (what was logged stays, marked failed).
`WandbLogger` makes one wandb run per scgmem run directory: its id is kept in
`<run dir>/wandb_run.json` and passed back with resume="allow", so a resumed (killed, preempted,
requeued) job continues the same wandb run. The run holds

- the resolved config (wandb's config panel; `run_dir` added),
- the live progress (`progress/answered`, `progress/total`, `running/f1`, `running/bleu1`, tokens),
- the per-category metrics (`<category>/f1`, `<category>/bleu1`, `<category>/evidence_recall`,
  `<category>/n`), `average/f1`, `average/bleu1`, cost (`tokens/...`, `timing/...`),
- the predictions as a `wandb.Table` (one row per scored question),
- any figures (PNG) in the run directory or its `figures/`.

Nothing is uploaded unless asked for: the mode is `mode` when set (logger.mode=online), else
the WANDB_MODE environment variable, else "offline". Offline runs land in `<dir>/wandb/`
(dir: `logger.dir`, else WANDB_DIR, else the run directory) and upload later with
`wandb sync <that offline-run folder>`.

    scgmem-run logger=wandb                               # offline, files under the run directory
    WANDB_MODE=online scgmem-run logger=wandb logger.project=my-project
"""
from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from scgmem.harness.records import read_predictions, write_json_atomic
from scgmem.harness.safe_files import read_json_file
from scgmem.harness.untrusted import StoredFileError
from scgmem.scoring.metric_table import answer_metrics, record_metrics

log = logging.getLogger(__name__)

MODES = ("online", "offline", "disabled")
# Prediction fields shown as table columns, in this order; lists are joined, others dropped.
TABLE_COLUMNS = ("sample_id", "qa_index", "category", "question", "reference", "prediction",
                 *record_metrics(), "evidence", "retrieved", "latency_s", "prompt_tokens", "seed_keys", "context_keys")


def resolve_mode(mode: str | None) -> str:
    """The wandb mode to use: `mode`, else $WANDB_MODE, else "offline" (never upload by default)."""
    chosen = mode if mode is not None else (os.environ.get("WANDB_MODE") or "offline")
    if chosen not in MODES:
        raise ValueError(f"logger.mode / WANDB_MODE must be one of {MODES}, got {chosen!r}")
    return chosen


def flat_metrics(summary: dict) -> dict[str, float | int]:
    """The numbers of a summary.json under wandb keys, e.g. {"multi_hop/f1": 12.5, "average/f1": ...}."""
    out: dict[str, float | int] = {}
    for cat, values in (summary.get("categories") or {}).items():
        for key in (*record_metrics(), "n"):
            if values.get(key) is not None:
                out[f"{cat}/{key}"] = values[key]
    for key, value in (summary.get("average") or {}).items():
        if value is not None:
            out[f"average/{key}"] = value
    for key in ("n_questions", "structural_hallucination_rate"):
        if summary.get(key) is not None:
            out[key] = summary[key]
    for phase, counts in (summary.get("tokens") or {}).items():
        for key, value in (counts or {}).items():
            if isinstance(value, (int, float)):
                out[f"tokens/{phase}/{key}"] = value
    for key, value in (summary.get("timing") or {}).items():
        if isinstance(value, (int, float)):
            out[f"timing/{key}"] = value
    return out


def progress_metrics(records: list[dict], total: int, memories_ready: int, conversations: int,
                     usage: dict, elapsed_s: float) -> dict[str, float | int]:
    """Live progress of a run under wandb keys: questions answered of `total` (resumed ones
    included), memories built of `conversations`, the running mean F1 and BLEU-1 (in %, as in
    summary.json) over the answered questions, and the LLM tokens counted so far."""
    out: dict[str, float | int] = {
        "progress/answered": len(records), "progress/total": total,
        "progress/fraction": len(records) / total if total else 1.0,
        "progress/memories_ready": memories_ready, "progress/conversations": conversations,
        "progress/elapsed_s": round(elapsed_s, 3)}
    for key in (m.name for m in answer_metrics()):
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            out[f"running/{key}"] = 100.0 * sum(values) / len(values)
    for phase, counts in (usage or {}).items():
        for key, value in (counts or {}).items():
            if isinstance(value, (int, float)):
                out[f"tokens/{phase}/{key}"] = value
    return out


def _cell(value):
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return value


def prediction_rows(run_dir: Path) -> tuple[list[str], list[list]]:
    """(columns, rows) of predictions.jsonl for a wandb.Table; columns present in any record."""
    path = run_dir / "predictions.jsonl"
    records = read_predictions(path)  # checked against the data by the run that wrote them
    columns = [c for c in TABLE_COLUMNS if any(c in r for r in records)]
    return columns, [[_cell(r.get(c)) for c in columns] for r in records]


RUN_ID_FILE = "wandb_run.json"


def run_id_for(run_dir: Path) -> str:
    """The wandb run id of `run_dir`: read from its wandb_run.json, or made and written there now,
    so every later (resumed) job of the same run directory logs to the same wandb run."""
    path = Path(run_dir) / RUN_ID_FILE
    if path.is_file():
        try:
            run_id = read_json_file(path, 1 << 16)["id"]
        except (StoredFileError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: field 'id' unreadable ({e}); delete the file to start a new wandb run") from None
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"{path}: field 'id' must be a non-empty string, got {run_id!r}")
        return run_id
    run_id = secrets.token_hex(8)  # wandb ids: letters and digits, unique per project
    write_json_atomic(path, {"id": run_id}, root=Path(run_dir))
    return run_id


class NullLogger:
    """Tracks nothing; the run's files are the record."""

    def start(self, config: dict, run_dir: Path, name: str) -> None:
        return None

    def log_progress(self, metrics: dict) -> None:
        return None

    def abort(self) -> None:
        return None

    def log_run(self, config: dict, summary: dict, run_dir: Path) -> None:
        return None


class WandbLogger:
    """Logs one scgmem run to wandb (see the module docstring).

    Args:
        project, entity, group, tags, job_type: wandb.init arguments. group None = the sweep
            directory's name for multirun jobs (so a sweep's runs are grouped), else none.
        mode: "online" | "offline" | "disabled" | None (= $WANDB_MODE, else "offline").
        dir: where wandb writes its files; None = $WANDB_DIR, else the run directory.
        log_predictions: log predictions.jsonl as a wandb.Table.
        log_figures: log the PNG files found in the run directory (and its figures/).
    """

    def __init__(self, project: str = "scgmem", entity: str | None = None, mode: str | None = None,
                 group: str | None = None, tags: list[str] | tuple[str, ...] = (), job_type: str = "eval",
                 dir: str | None = None, log_predictions: bool = True, log_figures: bool = True) -> None:
        resolve_mode(mode)  # fail on a bad value now, not after a long run
        self.project, self.entity, self.mode, self.group = project, entity, mode, group
        self.tags, self.job_type, self.dir = list(tags or ()), job_type, dir
        self.log_predictions, self.log_figures = log_predictions, log_figures
        self._run = None  # the wandb run between start() and log_run() / abort()

    def _init(self, *, name: str, config: dict, group: str | None, job_type: str, default_dir: Path,
              run_id: str | None = None):
        import wandb

        # Passed explicitly each time: wandb reads $WANDB_DIR once per process, so a later run
        # of the same process (a multirun job) would otherwise keep the first one's folder.
        wdir = self.dir or os.environ.get("WANDB_DIR") or str(default_dir)
        Path(wdir).mkdir(parents=True, exist_ok=True)
        resume = {"id": run_id, "resume": "allow"} if run_id else {}
        return wandb.init(project=self.project, entity=self.entity, name=name, group=group, tags=self.tags,
                          job_type=job_type, config=config, dir=wdir, mode=resolve_mode(self.mode),
                          reinit="create_new", **resume)

    def _group(self, run_dir: Path) -> str | None:
        """`group`, else the sweep folder's name for a multirun job (results/runs/multirun/<sweep>/...)."""
        if self.group is not None:
            return self.group
        parts = run_dir.resolve().parts
        if "multirun" in parts:
            i = parts.index("multirun")
            return parts[i + 1] if i + 1 < len(parts) else None
        return None

    def start(self, config: dict, run_dir: Path, name: str) -> None:
        """Open this run's wandb run (`name`: "<model>/<method>"), or continue the one its run
        directory names in wandb_run.json."""
        run_dir = Path(run_dir)
        self._run = self._init(name=f"{name}/{run_dir.name}", config={**config, "run_dir": str(run_dir)},
                               group=self._group(run_dir), job_type=self.job_type, default_dir=run_dir,
                               run_id=run_id_for(run_dir))

    def log_progress(self, metrics: dict) -> None:
        if self._run is not None:
            self._run.log(metrics)

    def abort(self) -> None:
        """Close the run as failed; what it logged stays, and a rerun continues it."""
        run, self._run = self._run, None
        if run is not None:
            run.finish(exit_code=1)

    def log_run(self, config: dict, summary: dict, run_dir: Path) -> None:
        import wandb

        run_dir = Path(run_dir)
        run, self._run = self._run, None
        if run is None:  # not started by the runner (e.g. a run logged after the fact)
            run = self._init(name=f"{summary.get('model')}/{summary.get('method')}/{run_dir.name}",
                             config={**config, "run_dir": str(run_dir)}, group=self._group(run_dir),
                             job_type=self.job_type, default_dir=run_dir, run_id=run_id_for(run_dir))
        try:
            run.log(flat_metrics(summary))
            if self.log_predictions:
                columns, rows = prediction_rows(run_dir)
                if rows:
                    run.log({"predictions": wandb.Table(columns=columns, data=rows)})
            if self.log_figures:
                images = sorted(run_dir.glob("*.png")) + sorted((run_dir / "figures").glob("*.png"))
                for path in images:
                    run.log({f"figures/{path.stem}": wandb.Image(str(path))})
        finally:
            run.finish()
        log.info("wandb (%s): logged %s to project %s", resolve_mode(self.mode), run_dir, self.project)

    def log_report(self, name: str, tables: dict[str, list[dict]], images: list[Path],
                   out_dir: Path = Path("results")) -> None:
        """Log a report (scgmem-report --wandb): each table's rows as a wandb.Table, each figure."""
        import wandb

        run = self._init(name=name, config={"report": name}, group=self.group, job_type="report",
                         default_dir=Path(out_dir))
        try:
            for key, rows in tables.items():
                if rows:
                    columns = list(rows[0])
                    run.log({key: wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])})
            for path in images:
                run.log({f"figures/{Path(path).stem}": wandb.Image(str(path))})
        finally:
            run.finish()
