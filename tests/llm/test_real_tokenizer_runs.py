"""Every method end to end on a one-session slice with tiny random models that carry the real
Llama-3.2 and Qwen2.5 vocabularies, special tokens and chat templates (issue 26, item 5):
`scgmem-run model=local model.path=<folder>` goes through three EOS ids and no pad token
(Llama) and 151,936 score columns for 151,665 tokens (Qwen). Slow (18 runs); the fast variant
is tests/llm/test_real_tokenizers.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = sorted(p.stem for p in (ROOT / "configs" / "method").glob("*.yaml"))


@pytest.fixture(scope="module", params=["llama3.2", "qwen2.5"])
def real_model(request, tmp_path_factory):
    from scgmem.llm.doubles.tiny_real_models import build_tiny_real_model

    return request.param, build_tiny_real_model(request.param, tmp_path_factory.mktemp(request.param))


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_method_runs_with_real_tokenizer(real_model, method, tmp_path):
    family, folder = real_model
    run_dir = tmp_path / "run"
    env = {**os.environ, "SCGMEM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "scgmem.run", "model=local", f"model.path={folder}",
                           "model.context_window=8192", f"method={method}", "data.samples=[conv-26]",
                           "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false",
                           f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["n_questions"] > 0
    template = summary["generation"]["chat_template"]
    marker = "<|start_header_id|>" if family == "llama3.2" else "<|im_start|>"
    assert marker in template["probe"]
    lines = (run_dir / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == summary["n_questions"]
