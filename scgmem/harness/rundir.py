"""A run directory holds the results of exactly one configuration.

`run.json` records the resolved config that produced the directory's predictions (minus
knobs that do not change a number: progress bars, the logger, cache location). A rerun
with the same config resumes; a different config is refused, never mixed.

Settings that change only speed and memory (SPEED: batch sizes, the batch token budget, the
prefix cache, conversations in flight) may differ on a resume, e.g. a smaller
model.max_batch_tokens after a CUDA OOM. They can still move a number in the last digits (in
bfloat16 a row's result depends on what else is in its batch), so run.json keeps them
(`speed`) and a list of every change with the number of predictions written before it
(`speed_changes`); summary.json copies that list.
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
           ("model", "retries"), ("model", "backoff_s"),
           # the judge labels predictions after they are made (judge.json guards its own labels)
           ("protocol", "judge"),
           # which chunks this process answers, not what any answer is: a shard's directory may be
           # finished by an unsharded rerun, and question shards merge (scgmem/harness/pipeline.py)
           ("run", "question_shard")}


# Settings that change only speed and memory: a resume may change them (recorded, see above).
# configs/hydra/default.yaml keeps them out of job folder names too (tests/harness/test_resume_settings.py).
SPEED = {("run", "parallel_conversations"), ("run", "answer_batch_size"), ("model", "batch_size"),
         ("model", "max_batch_tokens"), ("model", "prefix_cache"), ("model", "prefix_cache_min_tokens"),
         ("model", "prefix_cache_max_tokens"), ("model", "memo_entries"), ("model", "sdpa_backends"),
         ("embedder", "batch_size")}


# Settings added after runs were made, and the value that reproduces what the code did before
# them (a function of the current settings): a run.json without the key compares as if it held
# that value, so a run started before the key existed resumes when nothing it computes changes.
ADDED = {
    "model.attn_implementation": lambda cur: "sdpa",   # transformers' own attention, as before
    "model.static_cache": lambda cur: False,
    "model.compile": lambda cur: False,
    "run.jobs_per_gpu": lambda cur: 1,
    "run.pin_gpus": lambda cur: False,
    "data.gold": lambda cur: "original",  # the file's own answers, as before data.gold existed
    # scores were in the weights' dtype; float32 scores on float32 weights are the same numbers
    "model.score_dtype": lambda cur: cur.get("model.score_dtype") if cur.get("model.dtype") in ("float32", "fp32")
    else "model",
    # The caps moved from the model configs (model.caps.*) into the method and protocol configs, which
    # state one per profile (issue 27). The profile only picks values that are compared resolved
    # (method.*_tokens, protocol.max_new_tokens), so a run made before it compares as if it held today's.
    "model.cap_profile": lambda cur: cur["model.cap_profile"],
}
# Settings that no longer exist, by prefix: a stored run.json drops them. model.caps.* named the
# caps the method and protocol configs read; their resolved values are compared where they act.
RETIRED = ("model.caps.",)
# Classes that moved to another module: a run.json naming the old path names the same class.
MOVED = {"scgmem.embedder.Embedder": "scgmem.llm.embedder.Embedder",
         # the top-level package `baselines` became scgmem.baselines, its families subpackages (issue 27)
         "baselines.amem.AMem": "scgmem.baselines.amem.AMem",
         "baselines.full_context.FullContext": "scgmem.baselines.full_context.FullContext",
         "baselines.memgpt.MemGPT": "scgmem.baselines.memgpt.MemGPT",
         "baselines.memorybank.MemoryBank": "scgmem.baselines.memorybank.MemoryBank",
         "baselines.rag.DenseRAG": "scgmem.baselines.rag.DenseRAG",
         "baselines.rag.LastTurns": "scgmem.baselines.rag.LastTurns",
         "baselines.rag_locomo.LoCoMoRAG": "scgmem.baselines.rag.LoCoMoRAG",
         "baselines.readagent.ReadAgent": "scgmem.baselines.readagent.ReadAgent"}


def upgraded(previous: dict, current: dict) -> dict:
    """A stored run.json config read with today's names: moved targets renamed, retired settings
    dropped, added settings filled with the value that reproduces the older code."""
    out = {k: MOVED.get(v, v) if k.endswith("_target_") and isinstance(v, str) else v for k, v in previous.items()
           if not k.startswith(RETIRED)}
    for key, before in ADDED.items():
        if key not in out and key in current:
            out[key] = before(current)
    return out


class RunDirMismatch(RuntimeError):
    """The run directory holds results of a different configuration."""


def _ignored(key: tuple) -> bool:
    return any(key[: len(i)] == i for i in IGNORED | SPEED)


def speed_settings(config: dict) -> dict:
    """The SPEED settings of a config (plain dict) as {"dotted.key": value}."""
    out = {}
    for key in sorted(SPEED):
        node = config
        for part in key:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out[".".join(key)] = node
    return out


def speed_changes(run_dir: Path) -> list[dict]:
    """The SPEED changes recorded in `run_dir`/run.json ([] when none or no run.json)."""
    try:
        return list(json.loads((run_dir / "run.json").read_text()).get("speed_changes") or [])
    except (OSError, ValueError, AttributeError):
        return []


def comparable_settings(obj, prefix=()) -> dict:
    """A config (plain dict) as {"dotted.key": leaf}, without the IGNORED and SPEED settings: what two runs
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
    resolved = OmegaConf.to_container(cfg, resolve=True)
    current, speed = comparable_settings(resolved), speed_settings(resolved)
    path = run_dir / "run.json"
    record: dict = {}
    if path.is_file():
        try:
            record = json.loads(path.read_text())
            previous = record["config"]
            record = record if isinstance(record, dict) else {}
            # A run.json written before a setting joined IGNORED still holds it: drop it here too.
            previous = {k: v for k, v in previous.items() if not _ignored(tuple(k.split(".")))}
            previous = upgraded(previous, current)
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
    changes = list(record.get("speed_changes") or [])
    before = record.get("speed")
    if before is not None and before != speed:
        pred = run_dir / "predictions.jsonl"
        done = sum(1 for line in pred.read_bytes().splitlines() if line.strip()) if pred.is_file() else 0
        keys = sorted(k for k in set(before) | set(speed) if before.get(k) != speed.get(k))
        changes.append({"predictions_before": done, "from": {k: before.get(k) for k in keys},
                        "to": {k: speed.get(k) for k in keys}})
    write_json_atomic(path, {"config": current, "speed": speed, "speed_changes": changes})
