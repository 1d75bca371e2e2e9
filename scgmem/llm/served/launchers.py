"""One interface for the serving engines the harness starts: `start` a server of one model (its own
session, its log in a file, a bounded wait on /health), `stop` it, and the run overrides that point
a run at a URL. `make reproduce-* BACKEND=<name>` (scgmem/harness/served_sweep.py) starts one per
model through it; the backend configs (configs/backend/*.yaml) say which launcher and what it serves.

    spec = ServeSpec(model="Qwen/Qwen2.5-3B-Instruct", served_name="qwen2.5-3b", dtype="bfloat16",
                     max_model_len=32768)
    server = launcher("vllm").start(spec, port=18100, log=Path("vllm.log"), gpu="0")
    ...   # scgmem-run ... server.overrides
    server.stop()

Each launcher writes only its command line and environment; launch.py owns the process (its
`popen_logged`, `wait_healthy` and `stop_process`). Imports nothing heavy.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from scgmem.llm.served.launch import EngineStartError, popen_logged, stop_process, wait_healthy


@dataclass(frozen=True)
class ServeSpec:
    """What a server serves (a backend config's `serve` node, resolved): the weights as a folder or
    hub id (`embedded`: the embedded model), the name requests carry, dtype and window."""

    model: str
    served_name: str
    dtype: str = "float32"
    max_model_len: int = 8192
    host: str = "127.0.0.1"

    @classmethod
    def of(cls, serve: dict) -> "ServeSpec":
        return cls(model=str(serve["model"]), served_name=str(serve["served_name"]), dtype=str(serve["dtype"]),
                   max_model_len=int(serve["max_model_len"]), host=str(serve.get("host", "127.0.0.1")))


def run_overrides(url: str) -> list[str]:
    """scgmem-run overrides that point a served backend at the server at `url` (its /v1 root)."""
    return [f"backend.llm.base_url={url}"]


@dataclass
class Server:
    """A server a launcher started; `stop` ends its process group (its workers too)."""

    proc: object
    url: str
    log: Path | None
    overrides: list[str] = field(default_factory=list)

    def stop(self) -> None:
        stop_process(self.proc)


class Launcher:
    """Starts one engine. Subclasses give `command` and may add to `environment` and `check`."""

    name = "engine"
    health = "/health"

    def check(self, spec: ServeSpec) -> None:
        """Raise EngineStartError (one line) when this machine cannot start the engine on `spec`;
        called before any server starts."""

    def command(self, spec: ServeSpec, port: int) -> list[str]:
        raise NotImplementedError

    def environment(self, gpu: str | None) -> dict:
        env = dict(os.environ)
        if gpu is not None:  # one model per GPU: the engine sees only its own
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        return env

    def start(self, spec: ServeSpec, *, port: int, log: Path | None = None, gpu: str | None = None,
              wait_s: float = 1800.0, on_spawn=None) -> Server:
        """The server, answering /health within `wait_s` (else killed: EngineStartError). `on_spawn(proc)`
        is called before the wait, so that a signal during a long start can stop it too."""
        self.check(spec)
        proc = popen_logged(self.command(spec, port), log, env=self.environment(gpu))
        if on_spawn is not None:
            on_spawn(proc)
        root = f"http://{spec.host}:{port}"
        wait_healthy(proc, root + self.health, wait_s=wait_s, what=f"{self.name} ({spec.served_name})", log=log)
        return Server(proc=proc, url=root + "/v1", log=log, overrides=run_overrides(root + "/v1"))


def _weights(spec: ServeSpec) -> str:
    if spec.model == "embedded":  # the embedded GGUF model, de-quantised by `make install`
        from scgmem.llm.served.vllm_server import embedded_model_dir

        return str(embedded_model_dir())
    return spec.model


class VllmLauncher(Launcher):
    """vLLM's OpenAI server with `make vllm`'s flags (scgmem/llm/served/vllm_server.py says why each)."""

    name = "vLLM"

    def check(self, spec: ServeSpec) -> None:
        from scgmem.llm.served.vllm_server import vllm_python

        if vllm_python() is None:
            raise EngineStartError("vLLM is not set up: run `make vllm-install` (or set SCGMEM_VLLM_PYTHON, "
                                   "or make's VLLM_VENV=<venv>)")

    def command(self, spec: ServeSpec, port: int) -> list[str]:
        from scgmem.llm.served.vllm_server import command, vllm_python

        cmd = command(_weights(spec), port, python=vllm_python(), served_name=spec.served_name, dtype=spec.dtype,
                      max_model_len=spec.max_model_len)
        return [spec.host if part == "127.0.0.1" else part for part in cmd]

    def environment(self, gpu: str | None) -> dict:
        from scgmem.llm.served.vllm_server import environment

        env = environment()
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        return env


class SglangLauncher(Launcher):
    """SGLang's server (CUDA only), with llguidance as its grammar backend (scgmem/llm/served/sglang.py)."""

    name = "SGLang"

    def python(self) -> str:
        return os.environ.get("SCGMEM_SGLANG_PYTHON") or sys.executable

    def check(self, spec: ServeSpec) -> None:
        if "SCGMEM_SGLANG_PYTHON" not in os.environ and importlib.util.find_spec("sglang") is None:
            raise EngineStartError("SGLang is not installed (CUDA machines: pip install sglang, or set "
                                   "SCGMEM_SGLANG_PYTHON to the interpreter that has it)")

    def command(self, spec: ServeSpec, port: int) -> list[str]:
        return [self.python(), "-m", "sglang.launch_server", "--model-path", _weights(spec), "--host", spec.host,
                "--port", str(port), "--dtype", spec.dtype, "--context-length", str(spec.max_model_len),
                "--served-model-name", spec.served_name, "--grammar-backend", "llguidance", "--random-seed", "0",
                "--sampling-defaults", "openai"]  # docs/reproduce.md, section 9: not generation_config.json's


class LlamacppLauncher(Launcher):
    """llama.cpp's server (xllamacpp) on a GGUF: the embedded model's bundled file only."""

    name = "llama.cpp"

    def check(self, spec: ServeSpec) -> None:
        if spec.model != "embedded":
            raise EngineStartError(f"llama.cpp serves GGUF files and the harness starts it only on the embedded "
                                   f"model's; for {spec.served_name} start one on its GGUF and pass BASE_URLS=<url>")

    def command(self, spec: ServeSpec, port: int) -> list[str]:
        from scgmem.llm.served.llamacpp_server import command

        return command(port, n_ctx=spec.max_model_len, slots=4)


LAUNCHERS = {"vllm": VllmLauncher, "sglang": SglangLauncher, "llamacpp": LlamacppLauncher}


def launcher(backend: str) -> Launcher:
    """The launcher of a backend config's name; a backend the harness cannot start is one line."""
    if backend not in LAUNCHERS:
        raise ValueError(f"backend={backend}: the harness starts servers for {', '.join(LAUNCHERS)} only; "
                         "for a server that is already running pass BASE_URLS=<url,...> (one per model)")
    return LAUNCHERS[backend]()
