"""`make reproduce-table1 BACKEND=vllm` end to end on the paper models' stand-ins (slow: two vLLM
starts on CPU and 2 x 6 runs, ~15 min on 2 loaded cores): both servers start and stop, every run meets
the output contract with no key outside the schema, the report lists both models, and the same
command after a kill resumes (the first model's finished runs start no server again).

    .venv/bin/python -m pytest -q -m slow tests/harness/test_reproduce_served.py
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scgmem.llm.served.launchers.vllm import vllm_python

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("standin-qwen2.5", "standin-llama3.2")
METHODS = ("full_context", "readagent", "memorybank", "memgpt", "amem", "scgmem")
SLICE = "data.samples=[conv-26] data.max_sessions=1 data.questions_per_category=1"
PORT = 18160  # this file's servers: 18160, 18161
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (ROOT / "data" / "locomo10.json").exists(), reason="make data"),
              pytest.mark.skipif(vllm_python() is None and os.environ.get("CI") != "true",
                                 reason="vLLM is not set up here (make vllm-install)")]


def scratch_tree(tmp_path: Path) -> Path:
    """A folder of links to this tree's code, data and venv with its own results/ (as
    tests/test_make_targets.py builds it), so the report's tables land there, not in the checkout."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in (".venv", "Makefile", "baselines", "configs", "data", "experiments", "scgmem", "scripts"):
        (tree / name).symlink_to(ROOT / name)
    (tree / "results").mkdir()
    (tree / "results" / "paper").symlink_to(ROOT / "results" / "paper")
    return tree


def make_command(tree: Path) -> list[str]:
    venv = Path(vllm_python()).parents[1] if vllm_python() else ROOT / ".venv-vllm"
    return ["make", "-C", str(tree), f"BIN={Path(sys.executable).parent}", "reproduce-table1", "BACKEND=vllm",
            f"MODELS={','.join(MODELS)}", f"SLICE={SLICE}", f"PORT={PORT}", f"VLLM_VENV={venv}"]


def servers_running() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if "vllm.entrypoints" in line and any(f"--port {p} " in line for p in (PORT, PORT + 1))]


def summaries(sweep: Path, model: str) -> list[Path]:
    return sorted((sweep / f"{model}@vllm").rglob("summary.json"))


def test_table1_through_vllm_on_both_standins_and_its_resume(tmp_path):
    tree = scratch_tree(tmp_path)
    sweep = tree / "results" / "runs" / "multirun" / "table1-vllm"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # first launch: killed once the first model's runs are all written
    proc = subprocess.Popen(make_command(tree), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline and not (sweep / "servers" / f"{MODELS[0]}@vllm.done").exists():
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the sweep stops its server and runs
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode != 0 and not servers_running(), log[-3000:]
    assert len(summaries(sweep, MODELS[0])) == len(METHODS)
    # the same command again: the first model starts no server, the second runs
    again = subprocess.run(make_command(tree), capture_output=True, text=True, env=env, timeout=3600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{MODELS[0]}@vllm: all 6 runs finished" in again.stdout
    assert f"{MODELS[1]}@vllm: server stopped" in again.stdout and not servers_running()
    for model in MODELS:
        found = summaries(sweep, model)
        assert sorted(json.loads(p.read_text())["method"] for p in found) == sorted(METHODS)
        for path in found:
            summary = json.loads(path.read_text())
            assert summary["model"] == f"{model}@vllm" and summary["backend"] == "vllm" and summary["n_questions"] > 0
            lines = (path.parent / "predictions.jsonl").read_text().splitlines()
            assert len(lines) == summary["n_questions"]
            for record in map(json.loads, lines):
                assert {"sample_id", "qa_index", "category", "question", "reference", "prediction", "f1", "bleu1",
                        "evidence", "retrieved", "evidence_recall", "latency_s", "prompt_tokens"} <= set(record)
            if summary["method"] == "scgmem":
                assert summary["structural_hallucination_counts"]["outside_schema"] == 0
                # exported (a random model's free keywords never parse: its memory holds no concept)
                assert json.loads((path.parent / "memory" / "conv-26.json").read_text())["n_turns"] > 0
        assert (sweep / "servers" / f"{model}@vllm.log").stat().st_size > 0
    table = (tree / "results" / "tables" / "table1.md").read_text()
    assert all(f"### {model}@vllm" in table for model in MODELS)
