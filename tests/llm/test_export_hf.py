"""The hub-model code path on CPU: the embedded model exported as a plain Hugging Face folder
and run with `model=local` (device_map auto, chat template under the policy, neutral decoding)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scgmem.llm.local.prepare import main as prepare_main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, smollm) -> Path:  # smollm: the de-quantised cache exists
    out = tmp_path_factory.mktemp("hf") / "smollm2"
    prepare_main(["--export-hf", str(out)])
    return out


def test_export_is_a_plain_hf_folder(exported):
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(exported).chat_template


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full_context", "scgmem"])
def test_local_model_runs_like_a_hub_model(exported, tmp_path, method):
    run_dir = tmp_path / method
    env = {**os.environ, "SCGMEM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "scgmem.run", "model=local", f"model.path={exported}", f"method={method}",
                    "data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1",
                    "run.progress=false", f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env, check=True, timeout=1800)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["model"] == "local" and summary["n_questions"] > 0
    calls = summary["generation"]["calls"]
    assert "answer/sampled" in calls
    for entry in calls.values():
        assert entry["settings"]["repetition_penalty"] == 1.0 and entry["settings"]["do_sample"] is False
    template = summary["generation"]["chat_template"]
    assert template["date"] == "2024-07-26" and "You are a helpful assistant." in template["probe"]
    assert isinstance(summary["outputs_cut_at_cap"], int)
    if method == "scgmem":
        assert any(kind.startswith("ingest/") for kind in calls)
