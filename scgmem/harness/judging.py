"""Judging a run's predictions into its directory: judgements.jsonl (resumable) and judge.json.

Used by `scgmem-run` when `protocol.judge` is set (after the answers) and by `scgmem-report
judge RUN_DIR` on a finished run. Files in `out_dir`:

- `judge.json`: the judge's settings (`Judge.settings`). A directory judged by another model,
  prompt version, temperature, token cap or category-5 rule is refused, never mixed; the
  number of runs may grow on a resume (the new runs are added).
- `judgements.jsonl`: one line per (question, run): sample_id, qa_index, category, run, label,
  parsed, reply, gold. Appended and fsynced per chunk (`records.PredictionWriter`); a rerun
  reads it back (`records.read_predictions`, which drops a half-written last line) and judges
  only the (question, run) pairs that are missing.

Each (question, run) of a sampled judge has its own seed, derived from (seed, sample_id,
qa_index, JUDGE_PURPOSE + run) as the pipeline derives its own, so a resumed run gives the
labels an uninterrupted one would.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping, Sequence

from scgmem.harness.pipeline import derive_seed
from scgmem.harness.records import PredictionWriter, read_predictions, write_json_atomic
from scgmem.scoring.judge import Judge, judge_scores
from scgmem.scoring.judge_prompt import CORRECT

log = logging.getLogger(__name__)

JUDGEMENTS = "judgements.jsonl"
JUDGE_SETTINGS = "judge.json"
JUDGE_SUMMARY = "judge_summary.json"
# derive_seed purposes: the pipeline uses 0-3; judge run r uses JUDGE_PURPOSE + r.
JUDGE_PURPOSE = 16
# Settings a resume may change: more runs only add labels.
RESUMABLE = ("runs",)


class JudgeMismatch(ValueError):
    """The directory holds labels of another judge; str(e) names the file and the settings."""


def _check_settings(out_dir: Path, settings: dict) -> None:
    path = out_dir / JUDGE_SETTINGS
    if path.is_file():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise JudgeMismatch(f"{path}: not valid JSON ({e}); move it away to judge afresh") from None
        diffs = [k for k in sorted(set(before) | set(settings))
                 if k not in RESUMABLE and before.get(k) != settings.get(k)]
        if diffs:
            shown = "; ".join(f"{k}: {str(before.get(k))[:40]!r} -> {str(settings.get(k))[:40]!r}" for k in diffs[:3])
            raise JudgeMismatch(f"{path}: these labels come from another judge ({shown}); "
                                "judge into another directory (--out) or move them away")
    elif (out_dir / JUDGEMENTS).is_file():
        raise JudgeMismatch(f"{out_dir / JUDGEMENTS} exists without {JUDGE_SETTINGS}: cannot tell its judge")
    write_json_atomic(path, settings)


def read_judgements(out_dir: str | Path) -> list[dict]:
    """The rows of `out_dir`/judgements.jsonl ([] when absent)."""
    return read_predictions(Path(out_dir) / JUDGEMENTS)


def judge_records(judge: Judge, records: Sequence[Mapping], out_dir: str | Path, categories: Mapping[int, str],
                  *, seed: int = 0, chunk: int = 64, n_resamples: int = 1000) -> dict:
    """Judge every record `judge.runs` times into `out_dir`, resuming what is there; returns
    {"settings", **judge_scores(...)} over these records' (question, run) labels."""
    if chunk < 1:
        raise ValueError(f"judge chunk must be positive, got {chunk!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = judge.settings()
    _check_settings(out_dir, settings)
    wanted = {(str(r["sample_id"]), int(r["qa_index"])) for r in records}
    done = [row for row in read_judgements(out_dir)
            if (row["sample_id"], row["qa_index"]) in wanted and row["run"] < judge.runs]
    have = {(row["sample_id"], row["qa_index"], row["run"]) for row in done}
    if have:
        log.info("judge: resuming, %d labels already in %s", len(have), out_dir / JUDGEMENTS)
    items = [judge.item(r) for r in records]
    writer = PredictionWriter(out_dir / JUDGEMENTS)
    rows = list(done)
    try:
        for run in range(judge.runs):
            todo = [i for i in items if (i.sample_id, i.qa_index, run) not in have]
            for start in range(0, len(todo), chunk):
                part = todo[start:start + chunk]
                seeds = [derive_seed(seed, i.sample_id, i.qa_index, JUDGE_PURPOSE + run) for i in part]
                new = [{**i.row(), "run": run, "label": v.label, "parsed": v.parsed, "reply": v.reply,
                        "gold": i.gold} for i, v in zip(part, judge.label(part, seeds))]
                writer.write(new)
                rows.extend(new)
                have.update((i.sample_id, i.qa_index, run) for i in part)
                log.info("judge: run %d/%d, %d/%d judged", run + 1, judge.runs, start + len(part), len(todo))
    finally:
        writer.close()
    return {"settings": settings, **judge_scores(rows, categories, n_resamples=n_resamples, seed=seed)}


def judged_fraction(out_dir: str | Path) -> dict[tuple[str, int], float]:
    """(sample_id, qa_index) -> share of the runs that labelled it CORRECT (the per-question J
    the tables bootstrap over); {} when the directory has no judgements."""
    votes: dict[tuple[str, int], list[bool]] = {}
    for row in read_judgements(out_dir):
        votes.setdefault((row["sample_id"], int(row["qa_index"])), []).append(row["label"] == CORRECT)
    return {k: sum(v) / len(v) for k, v in votes.items()}


# ---------------------------------------------------------------- the judge from a config
JUDGE_DEFAULTS = {"model": None, "model_set": [], "runs": 3, "temperature": 0.0, "max_new_tokens": 16,
                  "cat5_gold": "not_mentioned", "chunk": 64, "n_resamples": 1000}
SAME_MODEL = ("same", "self", "run")


def judge_options(value) -> dict | None:
    """`protocol.judge` as a full dict of options, or None (off). A string names the model
    (`protocol.judge=same` judges with the run's own model, `protocol.judge=qwen2.5-1.5b` with a
    model config, a folder or a hub id); a mapping sets any of JUDGE_DEFAULTS."""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        value = {"model": value}
    if not isinstance(value, Mapping):
        raise ValueError(f"protocol.judge must be null, a model name or a mapping of {sorted(JUDGE_DEFAULTS)}, "
                         f"got {value!r}")
    unknown = sorted(set(value) - set(JUDGE_DEFAULTS))
    if unknown:
        raise ValueError(f"protocol.judge: unknown keys {unknown}; known: {sorted(JUDGE_DEFAULTS)}")
    options = {**JUDGE_DEFAULTS, **value}
    if isinstance(options["model"], str) and options["model"] in SAME_MODEL:
        options["model"] = None
    return options


def judge_model_node(spec, sets: Sequence[str] = ()) -> dict:
    """The resolved model config (plain dict) of a judge model: a mapping is taken as it is; a
    string is a configs/model/<name>.yaml (e.g. smollm2-135m, openai_compatible), else a local
    folder or hub id loaded as `model=local model.path=<spec>`. `sets`: "key=value" overrides
    of model.* (e.g. base_url=..., model_id=... for a server)."""
    if isinstance(spec, Mapping):
        return dict(spec)
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from scgmem.config_resolvers import CONFIG_DIR

    spec = str(spec)
    if (CONFIG_DIR / "model" / f"{spec}.yaml").is_file():
        overrides = [f"model={spec}"]
    else:
        overrides = ["model=local", f"model.path='{spec}'", f"model.name='{Path(spec).name or spec}'"]
    overrides += [f"model.{s}" for s in sets]
    if GlobalHydra.instance().is_initialized():  # inside scgmem-run
        cfg = compose("config", overrides=overrides)
    else:
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
    return OmegaConf.to_container(cfg.model, resolve=True)


def make_judge(options: dict, llm) -> Judge:
    """The Judge of `options` (judge_options) on `llm` (already loaded)."""
    return Judge(llm, runs=options["runs"], temperature=options["temperature"],
                 max_new_tokens=options["max_new_tokens"], cat5_gold=options["cat5_gold"])
