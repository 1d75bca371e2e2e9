"""The `backend` group (configs/backend/): a model config says what the model is, a backend how it is
served. Every backend composes on every paper model and its client binds to OpenAICompatibleLLM;
`scgmem-run model=<paper model> backend=vllm` resolves with no other override, offline (what a GPU
node runs); the bad combinations are one line and exit 2 before anything loads."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from scgmem.config_resolvers import model_folder
from scgmem.harness.rundir import comparable_settings, upgraded

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
BACKENDS = sorted(p.stem for p in (CONFIGS / "backend").glob("*.yaml"))
PAPER = ("qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b")


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _bind(node) -> None:
    import inspect

    from hydra._internal.utils import _locate

    values = OmegaConf.to_container(node, resolve=True)
    inspect.signature(_locate(values.pop("_target_"))).bind(**values)


def test_the_group_has_the_five_backends():
    assert set(BACKENDS) == {"local", "vllm", "sglang", "llamacpp", "url"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", ["qwen2.5-1.5b", "llama3.2-3b", "standin-llama3.2", "smollm2-135m"])
def test_every_backend_serves_every_model_config(backend, model):
    extra = ["backend.llm.base_url=http://10.0.0.1:9000/v1"] if backend == "url" else []
    cfg = _compose([f"model={model}", f"backend={backend}", *extra])
    assert cfg.backend.name == backend
    if backend == "local":
        assert "llm" not in cfg.backend  # the model config's own class
        return
    llm = cfg.backend.llm
    _bind(llm)
    assert llm.name == f"{cfg.model.name}@{backend}" and llm.context_window == cfg.model.context_window
    assert llm.model_id == cfg.model.name and llm.cap_profile == cfg.model.cap_profile
    assert llm.tokenizer == (cfg.model.path if "path" in cfg.model else "embedded")
    assert cfg.backend.serve.dtype == cfg.model.dtype and cfg.backend.serve.max_model_len == cfg.model.context_window


def test_the_paper_models_keep_bf16_and_table1_keeps_the_papers_float32_on_a_server():
    assert _compose(["model=qwen2.5-3b", "backend=vllm"]).backend.serve.dtype == "bfloat16"
    cfg = _compose(["+experiment=table1", "model=qwen2.5-3b", "backend=vllm"])
    assert cfg.backend.serve.dtype == cfg.model.dtype == "float32"  # settings=paper, and the report flags others


def run_cli(*overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "scgmem.run", *overrides], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


def test_a_paper_model_on_vllm_resolves_with_no_other_override_offline():
    proc = run_cli("model=qwen2.5-1.5b", "backend=vllm", "--cfg", "job", "--resolve")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "???" not in proc.stdout
    cfg = yaml.safe_load(proc.stdout)
    llm = cfg["backend"]["llm"]
    assert llm["base_url"] == "http://127.0.0.1:8000/v1" and llm["engine"] == "vllm"
    assert llm["model_id"] == "qwen2.5-1.5b" and llm["name"] == "qwen2.5-1.5b@vllm"
    assert llm["tokenizer"] == cfg["backend"]["serve"]["model"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert llm["context_window"] == cfg["backend"]["serve"]["max_model_len"] == 32768


@pytest.mark.parametrize("overrides,needle", [
    (["model=local", "backend=vllm"], "no hub id or folder"),
    (["model=vllm", "backend=vllm"], "already a server's"),
    (["backend=url", "backend.llm.base_url=http://127.0.0.1:9/v1", "method=scgmem"], "backend.llm.engine"),
    (["backend=nope"], "unknown backend"),
])
def test_bad_backend_choices_are_one_line_before_anything_loads(overrides, needle):
    proc = run_cli(*overrides, "data.samples=[conv-26]")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert needle in lines[0]


def test_served_runs_get_their_own_folders_and_local_ones_keep_theirs():
    assert model_folder("qwen2.5-3b", "local") == "qwen2.5-3b"
    assert model_folder("qwen2.5-3b", "vllm") == "qwen2.5-3b@vllm"
    hydra = yaml.safe_load((CONFIGS / "hydra" / "default.yaml").read_text())
    assert "${model_folder:${hydra:runtime.choices.model},${hydra:runtime.choices.backend}}" in hydra["sweep"]["subdir"]
    for key in ("backend", "backend.serve.port", "backend.llm.base_url"):  # a resume may use another server
        assert key in hydra["job"]["config"]["override_dirname"]["exclude_keys"]


def test_a_run_made_before_the_backend_group_resumes():
    current = comparable_settings(OmegaConf.to_container(_compose(["model=smollm2-135m"]), resolve=True))
    assert current["backend.name"] == "local"
    before = {k: v for k, v in current.items() if not k.startswith("backend.")}
    assert upgraded(before, current) == current


def test_where_a_server_listens_is_not_what_it_serves():
    a = comparable_settings(OmegaConf.to_container(_compose(["model=qwen2.5-3b", "backend=vllm"]), resolve=True))
    b = comparable_settings(OmegaConf.to_container(
        _compose(["model=qwen2.5-3b", "backend=vllm", "backend.serve.port=18101"]), resolve=True))
    assert a == b and a["backend.llm.model_id"] == "qwen2.5-3b"
