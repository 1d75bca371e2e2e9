"""An experiment's sweep through served models: one server per model, the experiment's runs against
it, the server stopped afterwards (`make reproduce-table1 BACKEND=vllm`, and table2, fig3, fig4).

    python -m scgmem.harness.served_sweep --experiment table1 --backend vllm \\
        --models qwen2.5-1.5b,qwen2.5-3b,llama3.2-1b,llama3.2-3b --gpus 0,1,2,3 \\
        --sweep-dir results/runs/multirun/table1-vllm -- data.samples=[conv-26]

For each model it starts one server (scgmem/llm/served/launchers/__init__.py: the backend's launcher, on
the model config's weights, dtype and window) on port `--port` + the model's index, waits for
/health with a bound, runs `scgmem-run -m +experiment=<experiment> model=<m> backend=<b>` against
it with every conversation in flight (run.parallel_conversations) into the stable sweep folder,
and stops it, also on a failure, Ctrl-C or SIGTERM. With `--gpus` the models run side by side, one
per GPU (CUDA_VISIBLE_DEVICES of its server); without, or with fewer GPUs than models, the rest
wait for a free one. `--base-urls` (one per model) uses servers that are already running. Each
server's log lies beside the sweep (<sweep>/servers/<model>@<backend>.log). The same command after
a kill resumes: the run folders are stable, and a model whose runs all finished starts no server.

Bad input (a model config without weights, a backend that cannot serve a method, a GPU that is not
there, a port in use, BASE_URLS of another length than the models) is one line and exit 2, before
any model loads or server starts.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scgmem.config_resolvers import CONFIG_DIR
from scgmem.harness.served_plan import ModelPlan, PlanError, plan_models
from scgmem.llm.served.launchers.launch import EngineStartError, port_in_use, stop_process
from scgmem.llm.served.launchers import launcher

log = logging.getLogger("scgmem.served_sweep")


class Sweep:
    """The running servers and runs of one sweep, so that a signal stops every one of them."""

    def __init__(self, args, plans: list[ModelPlan], extra: list[str]) -> None:
        self.args, self.plans, self.extra = args, plans, extra
        self.lock = threading.Lock()
        self.servers: list = []
        self.starting: list = []  # server processes, from before their /health wait
        self.runs: list[subprocess.Popen] = []
        self.stopping = threading.Event()
        # one worker per GPU; servers already running (BASE_URLS) all at once; else one model at a time
        self.free_gpus = list(args.gpus) or [None] * (len(plans) if args.base_urls else 1)
        self.gpu_lock = threading.Lock()

    def take_gpu(self):
        with self.gpu_lock:
            return self.free_gpus.pop(0)

    def give_gpu(self, gpu) -> None:
        with self.gpu_lock:
            self.free_gpus.append(gpu)

    def run_command(self, plan: ModelPlan, overrides: list[str]) -> list[str]:
        return [sys.executable, "-m", "scgmem.run", "-m", f"+experiment={self.args.experiment}",
                f"model={plan.model}", f"backend={self.args.backend}", *overrides, *plan.defaults, *self.extra,
                f"hydra.sweep.dir={self.args.sweep_dir}"]

    def one(self, plan: ModelPlan) -> int:
        """Serve `plan`'s model, run its jobs, stop the server; the runs' exit code."""
        if self.stopping.is_set():
            return 130
        if plan.finished(self.args.sweep_dir):
            print(f"{plan.folder}: all {plan.jobs} runs finished in {self.args.sweep_dir}; no server started",
                  flush=True)
            return 0
        gpu = self.take_gpu()
        server = None
        try:
            if plan.url is None:
                logs = Path(self.args.sweep_dir) / "servers"
                logs.mkdir(parents=True, exist_ok=True)
                where = f" on GPU {gpu}" if gpu is not None else ""
                print(f"{plan.folder}: starting {self.args.backend}{where} on port {plan.port} "
                      f"(log {logs / (plan.folder + '.log')})", flush=True)
                server = launcher(self.args.backend).start(plan.spec, port=plan.port, log=logs / f"{plan.folder}.log",
                                                           gpu=gpu, wait_s=self.args.wait_s, on_spawn=self.spawned)
                with self.lock:
                    self.servers.append(server)
                    if self.stopping.is_set():
                        return 130
                overrides = server.overrides
            else:
                overrides = plan.url_overrides
            cmd = self.run_command(plan, overrides)
            print(f"{plan.folder}: {' '.join(cmd[2:])}", flush=True)
            with self.lock:
                if self.stopping.is_set():
                    return 130
                proc = subprocess.Popen(cmd)
                self.runs.append(proc)
            rc = proc.wait()
            if rc == 0:
                plan.marker(self.args.sweep_dir).parent.mkdir(parents=True, exist_ok=True)
                plan.marker(self.args.sweep_dir).write_text(plan.fingerprint())  # a relaunch skips this model
            print(f"{plan.folder}: runs {'finished' if rc == 0 else f'failed (exit {rc})'}", flush=True)
            return rc
        except EngineStartError as e:
            print(f"error: {plan.folder}: {e}", file=sys.stderr, flush=True)
            return 1
        finally:
            if server is not None:
                server.stop()
                print(f"{plan.folder}: server stopped", flush=True)
            self.give_gpu(gpu)

    def spawned(self, proc) -> None:
        """A server process that is still starting: a signal stops it too (its wait then fails)."""
        with self.lock:
            self.starting.append(proc)
            stop = self.stopping.is_set()
        if stop:
            stop_process(proc)

    def stop_all(self) -> None:
        """Stop every run and server of this sweep (a signal, a failure of the sweep itself)."""
        self.stopping.set()
        with self.lock:
            runs, servers, starting = list(self.runs), list(self.servers), list(self.starting)
        for proc in runs:
            stop_process(proc, grace_s=30.0)  # a run keeps what it wrote; its rerun resumes
        for server in servers:
            server.stop()
        for proc in starting:
            stop_process(proc)

    def run(self) -> int:
        workers = max(1, len(self.free_gpus))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(self.one, plan) for plan in self.plans]
            try:
                codes = [f.result() for f in futures]
            except BaseException:
                self.stop_all()
                for f in futures:
                    f.cancel()
                raise
        failed = [p.folder for p, rc in zip(self.plans, codes) if rc != 0]
        if failed:
            print(f"error: runs failed for {', '.join(failed)} (logs in {self.args.sweep_dir}); the same command "
                  "resumes them", file=sys.stderr)
            return 1
        return 0


def _interrupt(signum, frame) -> None:  # SIGTERM like Ctrl-C: unwind, stop servers and runs in `finally`
    raise KeyboardInterrupt(f"signal {signum}")


def visible_gpu_ids() -> list[str]:
    """The GPU indices this machine shows (`nvidia-smi -L`); [] without an NVIDIA driver."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", required=True, help="table1, table2, fig3 or fig4 (configs/experiment/)")
    parser.add_argument("--backend", required=True, help="a served backend of configs/backend/ (vllm, sglang, ...)")
    parser.add_argument("--models", default="", help="model configs, comma-separated (default: the experiment's)")
    parser.add_argument("--gpus", default="", help="GPU indices, one server per GPU side by side (default: none, "
                                                    "one model after another)")
    parser.add_argument("--base-urls", default="", help="servers already running, one per model (no server started)")
    parser.add_argument("--port", type=int, default=8100, help="the first model's server port; the i-th gets port+i")
    parser.add_argument("--sweep-dir", required=True, help="the stable sweep folder (hydra.sweep.dir)")
    parser.add_argument("--wait-s", type=float, default=1800.0, help="bound on each server's /health wait")
    args = parser.parse_args(argv)
    args.models, args.gpus, args.base_urls = _split(args.models), _split(args.gpus), _split(args.base_urls)
    return args, extra


def check(args, extra: list[str]) -> list[ModelPlan]:
    """Every check that needs no server and no model: the plans, or PlanError (one line)."""
    if args.backend in ("", "local"):
        raise PlanError("--backend local: the local backend needs no server; run `make reproduce-"
                        f"{args.experiment}` without BACKEND")
    if args.gpus:
        shown = visible_gpu_ids()
        missing = [g for g in args.gpus if g not in shown]
        if missing:
            raise PlanError(f"GPUS={','.join(args.gpus)}: this machine shows no GPU {', '.join(missing)} "
                            f"({len(shown)} visible: {','.join(shown) or 'none'})")
    if not args.base_urls:
        try:
            launcher(args.backend)
        except ValueError as e:
            raise PlanError(str(e)) from None
    if args.base_urls and args.models and len(args.base_urls) != len(args.models):  # before any model is looked at
        raise PlanError(f"BASE_URLS has {len(args.base_urls)} entries for {len(args.models)} models "
                        f"({', '.join(args.models)}): give one URL per model, in the same order")
    plans = plan_models(CONFIG_DIR, args.experiment, args.backend, args.models, extra)
    if args.base_urls and len(args.base_urls) != len(plans):  # the experiment's own models
        raise PlanError(f"BASE_URLS has {len(args.base_urls)} entries for {len(plans)} models "
                        f"({', '.join(p.model for p in plans)}): give one URL per model, in the same order")
    for i, plan in enumerate(plans):
        if args.base_urls:
            plan.use_url(args.base_urls[i])
            continue
        plan.port = args.port + i
        try:
            launcher(args.backend).check(plan.spec)
        except (EngineStartError, ValueError) as e:
            raise PlanError(str(e)) from None
        if port_in_use(plan.spec.host, plan.port):
            raise PlanError(f"port {plan.port} (for {plan.model}) is in use by another process; pass PORT=<first "
                            f"free port> (model i gets PORT+i)")
    return plans


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    args, extra = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        plans = check(args, extra)
        for plan in plans:
            plan.check_url()  # BASE_URLS: each server answers and serves one model
    except (PlanError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(args.sweep_dir).mkdir(parents=True, exist_ok=True)
    sweep = Sweep(args, plans, extra)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return sweep.run()
    except KeyboardInterrupt:
        print("interrupted: servers and runs stopped; the same command resumes", file=sys.stderr)
        return 130
    finally:
        sweep.stop_all()  # nothing is left running, whatever happened
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())

