"""Every target of the Makefile runs, on the tiny configuration where it can (issue 49): a signature
change under any target fails a test instead of a user's command.

Each target is in exactly one of three lists, and a target in none fails
`test_every_target_is_covered` (a new target needs its smoke entry here):

- FAST: run as written, in the default suite (seconds each);
- SLOW: run on the tiny random Llama, a one-session slice, the bench scripts' BENCH_TINY=1
  (`make test-slow`);
- ELSEWHERE: what needs a network, a GPU or a server of its own, or is the suite itself, with the
  reason and the test that covers it instead; `make -n` must still accept each.

The targets run with `make -C <scratch tree>`: a folder of links to this tree's code, data and
venv, with its own results/ and cache, so whatever a target writes by relative path (results/runs,
results/device, results/tables, .cache) lands in the scratch tree, never in the shared checkout.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv running the suite
LINKED = (".venv", "Makefile", "baselines", "configs", "data", "experiments", "scgmem", "scripts")
FAST = ("help", "data", "prepare-model", "reproduce-times")
SLOW = ("run", "bench-full", "bench-served", "bench-attention", "bench-score-head", "device-check",
        "reproduce-table1", "reproduce-table2", "reproduce-fig3", "reproduce-fig4", "report")
ELSEWHERE = {
    "bench": "every part on the tiny configuration: tests/scripts/test_bench_smoke.py (default suite)",
    "install": "downloads packages; it built the venv this suite runs in",
    "test": "this suite", "test-slow": "this suite",
    "clean": "deletes run outputs and caches",
    "bench-engine": "needs a served run's requests.jsonl and its server: tests/llm/test_in_flight_replay.py",
    "bench-drive-rate": "needs a recorded run: tests/scripts/test_replay_server.py runs its drive()",
    "bench-request-cost": "reads the committed conv-26 recording and compiles grammars (minutes): run by hand",
    "device-calibrate-vllm": "needs a GPU with vLLM (scripts/device_calibrate_vllm.py)",
    "device-wheels": "downloads wheels",
    "locomo-audit": "needs a clone of github.com/dial481/locomo-audit; tests/data/test_locomo_audit.py",
    "bench-gpu-shared": "CUDA only; its CPU dry run is phase 2 of device-check's dry run (SLOW here)",
    "vllm-install": "downloads vLLM", "vllm": "starts a vLLM server", "vllm-stop": "stops that server",
    "llamacpp": "starts a llama.cpp server", "llamacpp-stop": "stops that server",
    "browser": "installs Debian packages with apt; tests/report/test_view_browser.py runs on what it installs",
    "bench-view": "needs Chromium (`make browser`); tests/report/test_view_browser.py drives it through "
                  "scripts.bench_view.start_browser",
    "standins": "writes ~320 MB into .cache/standins; tests/harness/test_reproduce_served.py runs it (slow, with "
                "`reproduce-table1 BACKEND=vllm`) and tests/llm/test_served_vllm_standin.py builds them the same way",
}


def targets() -> list[str]:
    """The Makefile's documented targets (`make help` prints those with `## `)."""
    return re.findall(r"^([a-zA-Z0-9_-]+):.*?## ", (ROOT / "Makefile").read_text(), re.M)


def make(tree: Path, *args: str, timeout: int = 900, env: dict | None = None) -> str:
    """`make -C tree <args>` with this suite's venv; returns stdout, fails with the output's tail."""
    proc = subprocess.Popen(["make", "-C", str(tree), f"BIN={BIN}", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                            start_new_session=True)  # a group: a timeout stops make and what it started
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, f"make {' '.join(args)} exited {proc.returncode}:\n{out[-3000:]}\n{err[-3000:]}"
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A scratch tree: links to the code, data and venv; its own results/ (the paper's CSVs linked)
    and its own run cache (the embedded model's de-quantised copy linked, not the memory cache)."""
    tree = tmp_path_factory.mktemp("tree")
    for name in LINKED:
        (tree / name).symlink_to(ROOT / name)
    (tree / "results").mkdir()
    (tree / "results" / "paper").symlink_to(ROOT / "results" / "paper")
    models = Path(os.environ.get("SCGMEM_CACHE", Path.home() / ".cache" / "scgmem")) / "models"
    (tree / "cache").mkdir()
    if models.is_dir():
        (tree / "cache" / "models").symlink_to(models)
    return tree


def test_every_target_is_covered():
    listed = set(FAST) | set(SLOW) | set(ELSEWHERE)
    assert len(listed) == len(FAST) + len(SLOW) + len(ELSEWHERE), "a target is in two lists"
    missing = sorted(set(targets()) - listed)
    assert not missing, f"Makefile targets with no smoke entry in tests/test_make_targets.py: {missing}"
    assert set(FAST) | set(SLOW) <= set(targets()), "a target run here is gone from the Makefile"


# Only those the Makefile has: an entry may name a target another change is still adding.
@pytest.mark.parametrize("target", [t for t in targets() if t in ELSEWHERE])
def test_targets_not_run_here_still_parse(tree, target):
    assert make(tree, "-n", target).strip()


def test_help_lists_every_target(tree):
    shown = re.sub(r"\x1b\[[0-9;]*m", "", make(tree, "-s", "help"))  # without the colour codes
    assert [line.split()[0] for line in shown.splitlines() if line.strip()] == targets(), shown


def test_data_and_prepare_model_are_idempotent(tree):
    assert "sha256 ok" in make(tree, "data")
    assert "embedded model ready" in make(tree, "prepare-model", env={"SCGMEM_CACHE": str(tree / "cache")})


def test_reproduce_times(tree):
    out = make(tree, "reproduce-times")
    assert "table1" in out.lower() and re.search(r"\d+\.\d", out)


# --- slow: the tiny configuration ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tree) -> dict:
    """The tiny random Llama as scgmem-run overrides, and the environment of a tiny run."""
    from scgmem.llm.doubles.tiny_model import build_tiny_model

    path = build_tiny_model(tree / "tiny-model")
    model = f"model.path={path} model.device=cpu model.context_window=2048"
    # two sessions: the first holds questions of categories 1 and 2 only, and a figure's panel of a
    # category without questions fails (scgmem-report fig4: None bar heights)
    return {"model": model, "slice": "data.samples=[conv-26] data.max_sessions=2 data.questions_per_category=1",
            "env": {"SCGMEM_CACHE": str(tree / "cache"), "HF_HUB_OFFLINE": "1", "BENCH_TINY": "1",
                    "BENCH_OUT": str(tree / "bench"), "WANDB_MODE": "offline"}}


@pytest.mark.slow
def test_run(tree, tiny):
    make(tree, "run", f"RUN={BIN}/scgmem-run model=local {tiny['model']}", env=tiny["env"])
    summary = json.loads((tree / "results" / "runs" / "main" / "summary.json").read_text())
    assert summary["n_questions"] > 0 and summary["config"]["method"]["_target_"].endswith("SCGMem")


@pytest.mark.slow
def test_bench_full(tree, tiny):
    make(tree, "bench-full", env={**tiny["env"], "BENCH_PARTS": ""})
    [result] = (tree / "bench").glob("*-tiny.json")
    assert json.loads(result.read_text())["full_run"]["exit_code"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("target, written", [("bench-served", "*-served.json"), ("bench-attention", "attention-*.json"),
                                             ("bench-score-head", None)])
def test_bench_scripts(tree, tiny, target, written):
    out = make(tree, target, env=tiny["env"])
    if written:
        assert list((tree / "bench").glob(written)), out
    else:
        assert "ratio float32/bf16" in out


@pytest.mark.slow
def test_device_check_dry_run(tree, tiny):
    make(tree, "device-check", env={**tiny["env"], "DEVICE": "cpu", "METHODS": "full_context,scgmem",
                                    "PYTHON": sys.executable, "WHEELS": str(tree / "no-wheels")})
    written = {p.name for p in (tree / "results" / "device").iterdir()}
    assert {"throughput.json", "gpu_shared.json", "tiny.json", "probes.json"} <= written, written


@pytest.mark.slow
def test_reproduce_targets_then_report(tree, tiny):
    """Each reproduce-* sweep on the tiny model and a one-session slice, with its report; then
    `make report` over all four (into the scratch tree's results/tables and results/figures)."""
    for experiment in ("table1", "table2", "fig3", "fig4"):
        make(tree, f"reproduce-{experiment}", "MODELS=local", f"SLICE={tiny['model']} {tiny['slice']}",
             env=tiny["env"], timeout=1800)
        sweep = tree / "results" / "runs" / "multirun" / experiment
        assert list(sweep.rglob("summary.json")), f"{experiment}: no job finished"
    make(tree, "report", env=tiny["env"])
    assert list((tree / "results" / "tables").iterdir()) and list((tree / "results" / "figures").iterdir())
