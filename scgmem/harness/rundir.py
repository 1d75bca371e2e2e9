"""A run directory holds the results of exactly one configuration.

`run.json` records the resolved config that produced the directory's predictions (minus
knobs that do not change a number: progress bars, the logger, cache location). A rerun
with the same config resumes; a different config is refused, never mixed.
"""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from scgmem.harness.records import write_json_atomic

# Settings that never change a prediction, so a resumed run may differ in them
# (data._target_ names the class that reads the file, not what is read; model.cache_dir is where
# the de-quantised embedded model is kept, ${run.cache_dir}/models by default).
IGNORED = {("run", "progress"), ("run", "cache_dir"), ("run", "use_memory_cache"), ("logger",), ("data", "_target_"),
           ("model", "cache_dir"),
           # how a served model is reached, not what it serves (model=openai_compatible): a run
           # resumes against another server of the same model
           ("model", "base_url"), ("model", "api_key_env"), ("model", "max_concurrency"), ("model", "timeout_s"),
           ("model", "retries"), ("model", "backoff_s")}


class RunDirMismatch(RuntimeError):
    """The run directory holds results of a different configuration."""


def _ignored(key: tuple) -> bool:
    return any(key[: len(i)] == i for i in IGNORED)


def comparable_settings(obj, prefix=()) -> dict:
    """A config (plain dict) as {"dotted.key": leaf}, without the IGNORED settings: what two runs
    must agree on to share a run directory (or to be shards of one run)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            key = (*prefix, str(k))
            if _ignored(key):
                continue
            out.update(comparable_settings(v, key))
        return out
    return {".".join(prefix): obj}


def check_run_dir(run_dir: Path, cfg: DictConfig) -> None:
    """Refuse a directory whose predictions come from another config; record ours otherwise."""
    current = comparable_settings(OmegaConf.to_container(cfg, resolve=True))
    path = run_dir / "run.json"
    if path.is_file():
        try:
            previous = json.loads(path.read_text())["config"]
            # A run.json written before a setting joined IGNORED still holds it: drop it here too.
            previous = {k: v for k, v in previous.items() if not _ignored(tuple(k.split(".")))}
        except (ValueError, KeyError, AttributeError):
            previous = None
        if previous is not None and previous != current:
            diffs = [f"{k}: {previous.get(k)!r} -> {current.get(k)!r}"
                     for k in sorted(set(previous) | set(current)) if previous.get(k) != current.get(k)]
            raise RunDirMismatch(f"{run_dir} holds results of a different configuration ({'; '.join(diffs[:3])}"
                                 f"{' ...' if len(diffs) > 3 else ''}); use another hydra.run.dir")
    elif (run_dir / "predictions.jsonl").is_file():
        raise RunDirMismatch(f"{run_dir} holds predictions.jsonl but no run.json: cannot tell its configuration; "
                             "use another hydra.run.dir")
    write_json_atomic(path, {"config": current})
