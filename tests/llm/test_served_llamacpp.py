"""SCG-Mem against a real server: llama.cpp's own (PyPI xllamacpp, llguidance on) serving the bundled
SmolLM2 GGUF on 127.0.0.1, started and stopped here with a bounded wait. The output contract: no
generated key outside the schema, Eq. 10 on the memory export, a killed run that resumes, the
ablations and a k sweep (the long ones slow-marked)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

import pytest

from scgmem.llm.served.launchers.launch import free_port

pytest.importorskip("xllamacpp")
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "locomo10.json"
pytestmark = pytest.mark.skipif(not DATA.exists(), reason="data/locomo10.json missing (make data)")


@pytest.fixture(scope="module")
def server():
    from scgmem.llm.served.launchers.llamacpp import bundled_gguf, start

    port = free_port()
    proc = start(port, slots=4, threads=1, wait_s=60)
    yield {"url": f"http://127.0.0.1:{port}/v1", "model_id": str(bundled_gguf())}
    proc.kill()
    proc.wait(timeout=10)


def command(server, run_dir: Path | None, *extra: str, multirun: bool = False) -> list[str]:
    """The run's command line; `extra` overrides replace the defaults of the same key."""
    tokenizer = next(Path.home().glob(".cache/scgmem/models/SmolLM2-135M-Instruct.Q4_1")).as_posix()
    overrides = {"model": "openai_compatible", "model.engine": "llamacpp", "model.api": "completions",
                 "model.base_url": server["url"], "model.model_id": server["model_id"], "model.tokenizer": tokenizer,
                 "model.name": "smollm2-135m-llamacpp", "model.max_concurrency": "4", "method": "scgmem",
                 "data.path": str(DATA), "data.samples": "[conv-26]", "data.max_sessions": "1",
                 "data.questions_per_category": "1", "run.use_memory_cache": "false", "run.progress": "false"}
    if run_dir is not None:
        overrides["hydra.run.dir"] = str(run_dir)
    overrides.update(x.split("=", 1) for x in extra)
    return [sys.executable, "-m", "scgmem.run", *(["-m"] if multirun else []),
            *(f"{k}={v}" for k, v in overrides.items())]


def run(server, run_dir: Path, *extra: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(command(server, run_dir, *extra), capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())


def check_eq10(memory: dict) -> None:
    """Every exported edge weight is count_uv * log(N/df_u) * log(N/df_v) over the exported turns."""
    n, turns = memory["n_turns"], {c: set(ids) for c, ids in memory["concepts"].items()}
    idf = {c: math.log(n / len(ids)) for c, ids in turns.items()}
    exported = {tuple(sorted((u, v))): w for u, v, w in memory["edges"]}
    assert exported, "no edge exported"
    for (u, v), w in exported.items():
        assert w == pytest.approx(len(turns[u] & turns[v]) * idf[u] * idf[v], rel=1e-9), (u, v)
    for u, v in combinations(sorted(turns), 2):
        if turns[u] & turns[v] and idf[u] * idf[v] > 0:
            assert (u, v) in exported, f"co-occurring pair {u}, {v} has no edge"


def check_contract(summary: dict, run_dir: Path) -> None:
    counts = summary["structural_hallucination_counts"]
    assert counts["generated"] > 0 and counts["outside_schema"] == 0, counts
    server = summary["generation"]["server"]
    assert server["engine"] == "llamacpp" and server["constrained_requests"] > 0, server
    check_eq10(json.loads((run_dir / "memory" / "conv-26.json").read_text()))
    lines = (run_dir / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == summary["n_questions"] == len({json.loads(x)["qa_index"] for x in lines})


def test_scgmem_on_a_llamacpp_server_meets_the_output_contract(server, tmp_path):
    summary = run(server, tmp_path / "run")
    check_contract(summary, tmp_path / "run")


@pytest.mark.slow
def test_a_killed_served_run_resumes(server, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    slice_ = ("data.max_sessions=2", "data.questions_per_category=3")
    proc = subprocess.Popen(command(server, run_dir, *slice_), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    predictions = run_dir / "predictions.jsonl"
    while time.monotonic() < deadline and not (predictions.exists() and predictions.read_text().count("\n") >= 1):
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = predictions.read_text().count("\n")
    assert done >= 1
    summary = run(server, run_dir, *slice_)
    check_contract(summary, run_dir)
    assert summary["n_questions"] > done


@pytest.mark.slow
@pytest.mark.parametrize("ablation", ["method.constraint=false", "method.evolution=false"])
def test_the_ablations_on_a_llamacpp_server(server, tmp_path, ablation):
    summary = run(server, tmp_path / "run", ablation)
    assert summary["n_questions"] > 0
    check_eq10(json.loads((tmp_path / "run" / "memory" / "conv-26.json").read_text()))


@pytest.mark.slow
def test_a_k_sweep_on_a_llamacpp_server(server, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = command(server, None, "method.k=5,35", f"hydra.sweep.dir={tmp_path / 'sweep'}", multirun=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = sorted((tmp_path / "sweep").rglob("summary.json"))
    assert len(summaries) == 2
    for path in summaries:
        check_contract(json.loads(path.read_text()), path.parent)


def test_backend_llamacpp_through_its_launcher_serves_the_window_per_slot_under_the_model_name(tmp_path):
    """`backend=llamacpp` as `make reproduce-* BACKEND=llamacpp` starts it (scgmem/llm/served/launchers/):
    every slot holds the model's whole window (llama.cpp splits n_ctx among its slots), GET /v1/models
    lists the model's name (the id the backend's requests carry, not the GGUF's path), and SCG-Mem runs
    through it with `model=smollm2-135m backend=llamacpp` and the launcher's overrides alone."""
    import urllib.request

    from scgmem.llm.served.launchers import ServeSpec, launcher

    spec = ServeSpec(model="embedded", served_name="smollm2-135m", max_model_len=8192)
    server = launcher("llamacpp").start(spec, port=free_port(), log=tmp_path / "llamacpp.log", wait_s=120)
    try:
        root = server.url.removesuffix("/v1")
        slots = json.loads(urllib.request.urlopen(root + "/slots", timeout=30).read())
        assert [s["n_ctx"] for s in slots] == [8192] * launcher("llamacpp").slots
        ids = [m["id"] for m in json.loads(urllib.request.urlopen(server.url + "/models", timeout=30).read())["data"]]
        assert ids == ["smollm2-135m"]
        run_dir = tmp_path / "run"
        proc = subprocess.run([sys.executable, "-m", "scgmem.run", "model=smollm2-135m", "backend=llamacpp",
                               *server.overrides, "method=scgmem", f"data.path={DATA}", "data.samples=[conv-26]",
                               "data.max_sessions=1", "data.questions_per_category=1", "run.use_memory_cache=false",
                               "run.progress=false", f"hydra.run.dir={run_dir}"],
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["model"] == "smollm2-135m@llamacpp"
        check_contract(summary, run_dir)
    finally:
        server.stop()
