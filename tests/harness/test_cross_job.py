"""Jobs that share a process (a Hydra multirun, a joblib worker) share only the weights: no
cache of one job changes another's outputs, and a model is released before the next loads."""
import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from scgmem.harness import run as run_module
from scgmem.llm import LLM

ROOT = Path(__file__).resolve().parents[2]
SHARED = "Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired. " * 4


def test_begin_job_forgets_every_cache_of_the_last_job(tiny_model_dir):
    llm = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4, prefix_cache_min_tokens=8)
    prompts = [llm.render(f"{SHARED}\nQuestion: {q}") for q in ("coffee", "kids, beach?", "art class")]
    first = llm.generate(prompts, max_new_tokens=4)
    llm.prefix_cache.reserve(10)
    assert llm.memo and len(llm.prefix_cache) and llm.settings_log.report()
    llm.begin_job()
    assert not llm.memo and len(llm.prefix_cache) == 0 and llm.prefix_cache.max_entries == 4
    assert llm.settings_log.report() == {} and llm.usage.snapshot() == {}
    again = llm.generate(prompts, max_new_tokens=4)  # computed again, as in a fresh process
    assert [g[0].token_ids for g in again] == [g[0].token_ids for g in first]
    assert llm.usage.snapshot()["other"]["memo_hits"] == 0


class Weights:
    """Stands in for a loaded model; `alive` lists those not yet garbage."""


def test_a_model_is_released_before_the_next_loads(monkeypatch):
    refs = []

    def load(node, what):
        gc.collect()
        alive = [r for r in refs if r() is not None]
        loaded = Weights()
        loaded.alive_at_load = len(alive)
        refs.append(weakref.ref(loaded))
        return loaded

    monkeypatch.setattr(run_module, "_LOADED", {})
    monkeypatch.setattr(run_module, "_instantiate", load)
    a = run_module._shared("model", OmegaConf.create({"name": "a"}), "model=a")
    assert run_module._shared("model", OmegaConf.create({"name": "a"}), "model=a") is a  # same config: kept
    del a
    b = run_module._shared("model", OmegaConf.create({"name": "b"}), "model=b")
    assert b.alive_at_load == 0  # "a" was dropped before "b" was built
    run_module._shared("embedder", OmegaConf.create({"name": "e"}), "embedder=e")
    assert run_module._shared("model", OmegaConf.create({"name": "b"}), "model=b") is b  # one per slot


def _sweep(tmp_path: Path, name: str, model_dir: Path, counts: str) -> list[Path]:
    sweep = tmp_path / name
    cmd = [sys.executable, "-m", "scgmem.run", "-m", "model=local", f"model.path={model_dir}", "method=last_turns",
           "method.k=5", "data.samples=[conv-26]", f"data.questions_per_category={counts}", "run.progress=false",
           "run.use_memory_cache=false", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(p.parent for p in sweep.rglob("summary.json"))


def _outputs(run_dir: Path) -> dict:
    """What a job's outputs say, less wall-clock times and where it ran."""
    recs = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"predictions": sorted(({k: v for k, v in r.items() if k != "latency_s"} for r in recs),
                                  key=lambda r: (r["sample_id"], r["qa_index"])),
            **{k: summary.get(k) for k in ("tokens", "generation", "oom", "categories", "average")}}


@pytest.mark.slow  # four processes of the tiny model (~1 min on 2 busy cores)
def test_two_jobs_in_one_process_in_either_order_equal_each_alone(tmp_path, tiny_model_dir):
    # Job "2" asks every question job "1" asks, and more: after "1" its first answers were memo hits
    # (and its other prompts batched apart from them); after "2", all of "1"'s were.
    alone = {n: _outputs(_sweep(tmp_path, f"alone{n}", tiny_model_dir, n)[0]) for n in ("1", "2")}
    for order in ("1,2", "2,1"):
        runs = _sweep(tmp_path, f"order{order.replace(',', '')}", tiny_model_dir, order)
        assert len(runs) == 2
        for run_dir in runs:
            n = str(json.loads((run_dir / "summary.json").read_text())["config"]["data"]["questions_per_category"])
            got = _outputs(run_dir)
            assert got["tokens"] == alone[n]["tokens"], (order, n)
            assert got == alone[n], (order, n)
            assert got["oom"] == {"splits": 0, "rows_split": 0}
