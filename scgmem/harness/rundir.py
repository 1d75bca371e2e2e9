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

run.json also records a content hash of the data (`data`: sha256 of the data file and, under
data.gold=audited, of the audit file): editing the data under the same path changes no setting,
so a resume compares the hashes and refuses when they differ. run.json itself is read back as
untrusted input (`read_run_json`): a file that is not what this module writes is refused in one
line, never treated as absent (its predictions would be adopted under another config).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from scgmem.harness.safe_files import read_json_file, write_json_atomic
from scgmem.harness.untrusted import StoredFileError, depth, need_dict, need_int

MAX_RUN_JSON_BYTES = 16 << 20  # a run.json is a few KB

# Settings that never change a prediction, so a resumed run may differ in them
# (data._target_ names the class that reads the file, not what is read; model.cache_dir is where
# the de-quantised embedded model is kept, ${run.cache_dir}/models by default).
IGNORED = {("run", "progress"), ("run", "cache_dir"), ("run", "use_memory_cache"), ("logger",), ("data", "_target_"),
           ("model", "cache_dir"),
           # how a served model is reached, not what it serves (model=openai_compatible): a run
           # resumes against another server of the same model
           *((*node, key) for node in (("model",), ("backend", "llm"))  # backend=<vllm|url|...>: the same keys
             for key in ("base_url", "api_key_env", "max_concurrency", "max_in_flight", "record_requests",
                         "timeout_s", "retries", "backoff_s")),
           ("backend", "serve", "host"), ("backend", "serve", "port"),
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
    # the backend group (configs/backend/): a run made before it ran the model config's own class
    "backend.name": lambda cur: "local",
}
# Settings that no longer exist, by prefix: a stored run.json drops them. model.caps.* named the
# caps the method and protocol configs read; their resolved values are compared where they act.
# method.dense_threshold was a mask-layout knob of the local backend (speed only, never a number):
# the trie keeps its own layout since issue 59.
RETIRED = ("model.caps.", "method.dense_threshold")
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


def read_run_json(path: Path) -> dict:
    """run.json read back: an object with a non-empty flat `config` ({dotted key: JSON value}),
    optional `speed` (flat), `speed_changes` (a list of objects) and `data` ({name: sha256 hex});
    anything else is refused in one line (StoredFileError)."""
    if path.exists() and not path.is_file() and not path.is_symlink():
        raise StoredFileError(path, "file", "not a file", "run.json must be a file")
    record = need_dict(read_json_file(path, MAX_RUN_JSON_BYTES), path, "run.json")
    config = record.get("config")
    if not isinstance(config, dict) or not config:
        raise StoredFileError(path, "config", config, "missing or empty: cannot tell which configuration made "
                              "this directory's predictions; use another hydra.run.dir")
    for name in ("config", "speed"):
        for key, value in need_dict(record.get(name, {}), path, name).items():
            if depth(value) > 4:  # leaves are scalars or short lists (data.samples, sdpa_backends)
                raise StoredFileError(path, f"{name}.{key}", "...", "nested deeper than a setting")
    changes = record.get("speed_changes", [])
    if not isinstance(changes, list):
        raise StoredFileError(path, "speed_changes", changes, "must be a list")
    for i, change in enumerate(changes):
        need_dict(change, path, f"speed_changes[{i}]")
        need_int(change.get("predictions_before"), path, f"speed_changes[{i}].predictions_before", 0, 10**9)
    for name, digest in need_dict(record.get("data", {}), path, "data").items():
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise StoredFileError(path, f"data.{name}", digest, "must be a sha256 hex digest")
    return record


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def data_hashes(data) -> dict[str, str]:
    """{"data": sha256 of the data file, "audit": sha256 of the audit file (data.gold=audited)} of a
    DataSource with a `path` (others: {} and nothing is compared)."""
    out = {}
    if isinstance(getattr(data, "path", None), (str, Path)) and Path(data.path).is_file():
        out["data"] = file_sha256(data.path)
    if getattr(data, "gold", None) == "audited":
        from scgmem.data.locomo_audit import AUDIT_PATH

        out["audit"] = file_sha256(AUDIT_PATH)
    return out


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
    """The SPEED changes recorded in `run_dir`/run.json ([] when there is no run.json)."""
    path = run_dir / "run.json"
    return list(read_run_json(path).get("speed_changes") or []) if path.is_file() else []


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


def check_run_dir(run_dir: Path, cfg: DictConfig, hashes: dict[str, str] | None = None,
                  before_write: Callable[[], None] | None = None) -> None:
    """Refuse a directory whose predictions come from another config or other data (`hashes`:
    `data_hashes` of the data now); record ours otherwise. `before_write` runs after the checks and
    before run.json is written (the runner checks the stored records there), so a refusal leaves
    run.json as it was."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    current, speed = comparable_settings(resolved), speed_settings(resolved)
    hashes = dict(hashes or {})
    path = run_dir / "run.json"
    record: dict = {}
    if path.exists() or path.is_symlink():
        record = read_run_json(path)
        # A run.json written before a setting joined IGNORED still holds it: drop it here too.
        previous = {k: v for k, v in record["config"].items() if not _ignored(tuple(k.split(".")))}
        previous = upgraded(previous, current)
        for name, digest in (record.get("data") or {}).items():
            if hashes.get(name, digest) != digest:
                what = "the audited-gold file" if name == "audit" else f"the data file {current.get('data.path')}"
                raise StoredFileError(path, f"data.{name}", digest[:16], f"{what} changed since this run started "
                                      f"(now {hashes[name][:16]}); its predictions answer other questions or golds: "
                                      "use another hydra.run.dir")
        if previous != current:
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
    if before_write is not None:
        before_write()
    # a run.json from before data hashes keeps none for what it cannot vouch for; its records were
    # checked against today's data (scgmem/harness/stored_records.py) and the hashes start now
    write_json_atomic(path, {"config": current, "speed": speed, "speed_changes": changes, "data": hashes},
                      root=run_dir)
