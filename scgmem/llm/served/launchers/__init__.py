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

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path

from scgmem.llm.served.launchers.launch import EngineStartError, popen_logged, stop_process, wait_healthy


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
    in_flight: int | None = None  # requests the client keeps in flight, when the engine wants fewer than the
    #                               backend config's max_in_flight (llama.cpp's few slots); None: the config's
    salts_cache = True  # the engine honours a request's cache_salt (a replay can run cold on a warm server)

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
        return Server(proc=proc, url=root + "/v1", log=log, overrides=self.overrides(root + "/v1"))

    def overrides(self, url: str) -> list[str]:
        """The run overrides for a server of this engine at `url` (its /v1 root)."""
        extra = [f"backend.llm.max_in_flight={self.in_flight}"] if self.in_flight else []
        return [*run_overrides(url), *extra]


def weights_of(spec: ServeSpec) -> str:
    """The folder or hub id a launcher serves (`embedded`: the embedded model's prepared folder)."""
    if spec.model == "embedded":  # the embedded GGUF model, de-quantised by `make install`
        from scgmem.llm.loading import EMBEDDED, resolve_model_dir

        return str(resolve_model_dir(None, **EMBEDDED))
    return spec.model


def names() -> list[str]:
    """The engines the harness can start: each module of this folder but launch.py (one per engine,
    named as its dialect in scgmem/llm/served/engines/)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg and m.name != "launch")


def launcher(backend: str) -> Launcher:
    """The launcher of a backend config's name (its module's `LAUNCHER`, imported when asked for); a
    backend the harness cannot start is one line."""
    if backend not in names():
        raise ValueError(f"backend={backend}: the harness starts servers for {', '.join(names())} only; "
                         "for a server that is already running pass BASE_URLS=<url,...> (one per model)")
    return importlib.import_module(f"{__name__}.{backend}").LAUNCHER()
