"""Shared pieces of the issue-42 tests (tests/harness/test_untrusted_*.py): a small real slice of
LoCoMo, pipelines on the scripted model (no weights), and `scgmem-run` with the model and embedder
swapped for the scripted ones (`RUNNER`), so the runner's one-line errors are tested end to end
in seconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "locomo10.json"
CATEGORIES = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}


def small_slice(path: Path = DATA, sessions: int = 3):
    """conv-26, its first session(s): the conversations a run would load."""
    from scgmem.data.locomo import load_locomo, select

    conversations, _ = load_locomo(path)
    return select(conversations, ["conv-26"], max_sessions=sessions)


def pipeline(method: str, run_dir: Path, cache_dir: Path | None = None, llm=None, questions_per_category: int = 2):
    """A Pipeline over `method`'s config on the scripted model; the memory cache on when `cache_dir`."""
    from scgmem.harness.cache import MemoryCache
    from scgmem.harness.pipeline import Pipeline
    from scgmem.llm.doubles.fake import BagEmbedder, ScriptedLLM, echo_reply
    from scgmem.scoring.protocols import AmemProtocol

    run_dir.mkdir(parents=True, exist_ok=True)
    llm, embedder = llm or ScriptedLLM(echo_reply), BagEmbedder()
    node = OmegaConf.load(ROOT / "configs" / "method" / f"{method}.yaml")
    cache = MemoryCache(cache_dir or run_dir / "cache", enabled=cache_dir is not None)
    return Pipeline(llm=llm, embedder=embedder, protocol=AmemProtocol(CATEGORIES),
                    method_factory=lambda view: instantiate(node, llm=view, embedder=embedder), run_dir=run_dir,
                    cache=cache, seed=0, answer_batch_size=4, questions_per_category=questions_per_category,
                    progress=False)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_lines(path: Path, records) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")


# `scgmem-run` in a subprocess with the scripted model and bag-of-words embedder in place of the
# configured ones (nothing else changes), so a test of the runner's error paths loads no weights.
# SCGMEM_TEST_FAIL_FSYNC=N: the N-th fsync after the model loads fails with ENOSPC (a full disk).
RUNNER = r"""
import errno, os, sys
import scgmem.harness.run as run
from scgmem.llm.doubles.fake import BagEmbedder, ScriptedLLM, echo_reply

def shared(slot, node, what):
    if slot == "model":
        fail_after = int(os.environ.get("SCGMEM_TEST_FAIL_FSYNC", "0"))
        if fail_after:
            real, calls = os.fsync, [0]
            def fsync(fd):
                calls[0] += 1
                if calls[0] >= fail_after:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return real(fd)
            os.fsync = fsync
        return ScriptedLLM(echo_reply, name="scripted")
    return BagEmbedder()

run._shared = shared
sys.argv = ["scgmem-run", *sys.argv[1:]]
run.main()
"""
FAST = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false",
        "run.answer_batch_size=2"]


def scgmem_run(*overrides, env=None, scripted: bool = True) -> subprocess.CompletedProcess:
    """`scgmem-run overrides...` (scripted model and embedder unless `scripted` is False)."""
    cmd = [sys.executable, "-c", RUNNER, *overrides] if scripted else [sys.executable, "-m", "scgmem.run", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The one stderr line of a refused run (exit code 2), asserted to be the only output there."""
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and err[0].startswith("error: "), \
        f"exit {proc.returncode}, stderr:\n{proc.stderr[-3000:]}"
    return err[0]
