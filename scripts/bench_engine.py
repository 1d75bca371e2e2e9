"""Bench part `engine`: how busy each method keeps a serving engine, per method, on vLLM and llama.cpp
(issue 46), against the local backend on the same slice.

    BENCH_PARTS=engine make bench                        # vLLM (when .venv-vllm exists) and llama.cpp
    BENCH_ENGINES=vllm BENCH_ENGINE_METHODS=scgmem,rag BENCH_PARTS=engine make bench
    BENCH_VLLM_URL=http://gpu-node:8000 BENCH_PARTS=engine make bench   # a server already up (not started here)

For each engine: its server is started on a free port by its launcher (scgmem/llm/served/launchers/: vLLM
with `make vllm`'s flags, its worker on one core; llama.cpp: the bundled GGUF, 4 slots of the model's whole
window, 1 thread), then every method runs the same conv-26 slice through it (`model=smollm2-135m
backend=<engine>`) with `backend.llm.record_requests=true`, each in its own `scgmem-run` child with its own empty
memory cache (so ingestion is measured, not loaded). Each run's requests are then replayed with no
dependencies (scripts/bench_replay.py: the replay bound), which gives

  engine utilization = run tokens/s / replay tokens/s      (goal >= 0.8)

with the replay cold: on vLLM every replayed request carries a fresh cache_salt; llama.cpp ignores that
field, so before its free and its ordered replay the bench restarts the llama.cpp server it started (a
server named by BENCH_LLAMACPP_URL is not restarted: its replays may read the run's cached prompts and
its utilizations are then too low).

and the cap the method's own order sets: mean requests in flight and the busy share of the run's span,
`order_cap` from a replay that sends each request as soon as its recorded causal parents are back (bench_replay's
causal replay): the utilization the method's chains of dependent requests allow at best, the harness's time,
step barriers and in-flight limit removed; `run_over_causal` = run / causal replay (what the harness adds), and
the critical path (the longest dependent chain, in requests and tokens).
The same slice also runs once per method on the local backend (`model=local`, 2 torch threads), so each
served run has `local_over_served` = local seconds / served seconds of ingest + answer (model loading
excluded; > 1: the served run was faster). Goals printed beside it: SCG-Mem on vLLM >= 3x local.

The local and served runs of a method go back to back, so both see the same load; the JSON keeps the load
average at the start and end of each. A tiny run (BENCH_TINY=1) runs llama.cpp only (no vLLM start, which
takes minutes), dense RAG alone, one question per category, and the local runs on the tiny random Llama: its
numbers mean nothing, it checks the code path.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from scgmem.llm.served.launchers import EngineStartError, ServeSpec, launcher
from scgmem.llm.served.launchers.launch import free_port
from scripts.bench_inputs import ROOT, Scale
from scripts.bench_sweep import model_overrides

METHODS = ("scgmem", "full_context", "rag", "rag_locomo", "memorybank", "readagent", "amem", "memgpt")
ENGINES = ("vllm", "llamacpp")  # the launchers that run on a CPU machine (SGLang needs CUDA)


def slice_overrides(scale: Scale) -> list[str]:
    """The full bench: session 1 of all 10 LoCoMo conversations, all in flight together
    (run.parallel_conversations=10), one question per category whose evidence lies in it (10+ scored);
    quick and tiny: conv-26's session 1 alone."""
    if scale.name == "full":
        return ["data.max_sessions=1", "data.questions_per_category=1", "run.parallel_conversations=10",
                "run.progress=false"]
    return ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false"]


def engine_overrides(engine: str, url: str) -> list[str]:
    """The run overrides of the embedded model through `engine`'s backend config at `url` (an OpenAI
    root ending in /v1): the launcher's own (scgmem/llm/served/launchers/)."""
    from scgmem.llm.served.launchers import launcher

    return ["model=smollm2-135m", f"backend={engine}", *launcher(engine).overrides(url)]


def run_method(run_dir: Path, overrides: list[str], threads: int) -> dict:
    """One `scgmem-run` child in `run_dir` with an empty memory cache of its own; its summary's timing."""
    cache = run_dir.parent / f"{run_dir.name}-cache"
    shutil.rmtree(cache, ignore_errors=True)
    models = Path(os.environ.get("SCGMEM_CACHE", Path.home() / ".cache" / "scgmem")) / "models"
    cache.mkdir(parents=True)
    if models.is_dir():
        os.symlink(models, cache / "models")  # the de-quantised model is shared; the memory is not
    env = {**os.environ, "SCGMEM_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "scgmem.run", *overrides, f"run.cache_dir={cache}",
                           f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"scgmem-run {' '.join(overrides)} exited {proc.returncode}: {tail[0]}")
    summary_path = run_dir / "summary.json"
    try:
        timing = json.loads(summary_path.read_text())["timing"]
        seconds = float(timing["ingest_s"]) + float(timing["answer_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RuntimeError(f"{summary_path}: field timing.ingest_s/answer_s unreadable ({e})") from e
    return {"run_dir": str(run_dir), "seconds": round(seconds, 2), "wall_s": round(wall, 2),
            "load_avg_1min_start": round(load, 2), "load_avg_1min_end": round(os.getloadavg()[0], 2)}


# what every engine serves: the embedded model, as configs/backend/base/served.yaml resolves it for
# model=smollm2-135m (its name is the model id the runs' requests carry)
SPEC = ServeSpec(model="embedded", served_name="smollm2-135m", dtype="float32", max_model_len=8192)


class Server:
    """A server for one engine: started here on a free port through its launcher, or one the user
    names (BENCH_<ENGINE>_URL; never stopped or restarted here)."""

    def __init__(self, engine: str, work: Path) -> None:
        self.launcher, self.work, self.server = launcher(engine), work, None
        given = os.environ.get(f"BENCH_{engine.upper()}_URL")
        if given:
            self.root = given.rstrip("/").removesuffix("/v1")
            return
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self._start()

    @property
    def proc(self):
        return None if self.server is None else self.server.proc

    def _start(self) -> None:
        self.server = self.launcher.start(SPEC, port=self.port, log=self.work / f"{self.launcher.name}.log",
                                          wait_s=900)

    def cold(self):
        """How a replay starts cold: None when the engine honours cache_salt (vLLM), else a restart of
        the server started here (llama.cpp ignores the salt); None for a server the user named, whose
        replays may then read the run's prompt cache."""
        return None if self.launcher.salts_cache or self.server is None else self.restart

    def restart(self) -> None:
        """The same server again on the same port, its prompt cache empty."""
        self.stop()
        self._start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def available(engine: str) -> str | None:
    """Why `engine` cannot run here (its launcher's own check), or None."""
    if os.environ.get(f"BENCH_{engine.upper()}_URL"):
        return None
    try:
        launcher(engine).check(SPEC)
    except EngineStartError as e:
        return str(e)
    return None


def _names(env: str, default: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(n for n in os.environ.get(env, ",".join(default)).split(",") if n)
    if unknown := sorted(set(names) - set(known)):
        raise ValueError(f"{env}: unknown {unknown}; choose from {', '.join(known)}")
    return names


def bench_engine(work: Path, scale: Scale, tiny_dir: Path | None = None) -> dict:
    """Every method through every available engine and locally, on the same slice."""
    from scripts.bench_replay import bench as replay_bench

    engines = _names("BENCH_ENGINES", ("llamacpp",) if scale.tiny else ENGINES, ENGINES)
    methods = _names("BENCH_ENGINE_METHODS", ("rag",) if scale.tiny else METHODS, METHODS)
    concurrency = int(os.environ.get("BENCH_REPLAY_CONCURRENCY", "64"))
    work.mkdir(parents=True, exist_ok=True)
    out: dict = {"slice": slice_overrides(scale), "methods": list(methods), "local": {}, "engines": {}}
    local = os.environ.get("BENCH_ENGINE_LOCAL", "1") != "0"  # 0: no local baseline (hours at 10 conversations)
    for method in methods if local else ():  # the local baseline once per method: 2 torch threads, as a user runs it
        out["local"][method] = run_method(work / f"local-{method}",
                                          [*slice_overrides(scale), f"method={method}", *model_overrides(tiny_dir)],
                                          threads=2)
    for engine in engines:
        if why := available(engine):
            out["engines"][engine] = {"skipped": why}
            print(f"bench engine: {engine} skipped: {why}", flush=True)
            continue
        server = Server(engine, work)
        runs = {}
        try:
            for method in methods:
                run_dir = work / f"{engine}-{method}"
                served = run_method(run_dir, [*slice_overrides(scale), f"method={method}",
                                              *engine_overrides(engine, server.root + "/v1"),
                                              "backend.llm.record_requests=true"], threads=1)
                replayed = replay_bench(run_dir, server.root, concurrency, reset=server.cold())
                runs[method] = {**served, **{k: replayed[k] for k in replayed if k not in ("run_dir", "method")}}
                if method in out["local"]:
                    runs[method]["local_over_served"] = round(out["local"][method]["seconds"] /
                                                              max(served["seconds"], 1e-9), 3)
                print(f"bench engine: {engine} {method}: utilization {replayed['engine_utilization']:.3f}, "
                      f"order cap {replayed.get('order_cap')}, run/causal {replayed.get('run_over_causal')}, "
                      f"local/served {runs[method].get('local_over_served')}", flush=True)
                if os.environ.get("BENCH_ENGINE_PARTIAL"):  # a long bench: what is done so far, kept
                    Path(os.environ["BENCH_ENGINE_PARTIAL"]).write_text(json.dumps(out | {"partial": runs}, indent=1))
        finally:
            server.stop()
        out["engines"][engine] = {"root": server.root, "started_here": server.proc is not None, "runs": runs}
    return out


def report_rows(result: dict) -> list[tuple]:
    """The lines `make bench` prints for this part: (measure, value, goal)."""
    rows = []
    for engine, entry in result["engines"].items():
        if "skipped" in entry:
            rows.append((f"{engine}: skipped ({entry['skipped']})", None, ""))
            continue
        for method, run in entry["runs"].items():
            rows.append((f"{engine} {method}: engine utilization", run["engine_utilization"], ">= 0.8"))
            rows.append((f"  mean in flight / busy share", run["run"]["mean_in_flight"],
                         f"busy {run['run']['busy_share']:.2f}"))
            if "order_cap" in run:
                cp = run["critical_path"]
                rows.append(("  order cap (causal / free replay)", run["order_cap"],
                             f"critical path {cp['requests']} of {cp['total_requests']} requests, {cp['tokens']} tokens"))
                rows.append(("  run / causal replay (what the harness keeps)", run["run_over_causal"], ">= 0.95"))
            if "local_over_served" in run:
                goal = ">= 3 (issue 46)" if (engine, method) == ("vllm", "scgmem") else ""
                rows.append((f"  local / {engine} seconds", run["local_over_served"], goal))
    return rows
