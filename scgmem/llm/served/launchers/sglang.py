"""SGLang's server (CUDA only; it cannot run on this CPU): the launcher `make reproduce-* BACKEND=sglang`
starts, with llguidance as its grammar backend (scgmem/llm/served/engines/sglang.py)."""
from __future__ import annotations

import importlib.util
import os
import sys

from scgmem.llm.served.launchers import Launcher, ServeSpec, weights_of
from scgmem.llm.served.launchers.launch import EngineStartError


class SglangLauncher(Launcher):
    """SGLang's server (CUDA only), with llguidance as its grammar backend (scgmem/llm/served/engines/sglang.py)."""

    name = "SGLang"

    def python(self) -> str:
        return os.environ.get("SCGMEM_SGLANG_PYTHON") or sys.executable

    def check(self, spec: ServeSpec) -> None:
        if "SCGMEM_SGLANG_PYTHON" not in os.environ and importlib.util.find_spec("sglang") is None:
            raise EngineStartError("SGLang is not installed (CUDA machines: pip install sglang, or set "
                                   "SCGMEM_SGLANG_PYTHON to the interpreter that has it)")

    def command(self, spec: ServeSpec, port: int) -> list[str]:
        return [self.python(), "-m", "sglang.launch_server", "--model-path", weights_of(spec), "--host", spec.host,
                "--port", str(port), "--dtype", spec.dtype, "--context-length", str(spec.max_model_len),
                "--served-model-name", spec.served_name, "--grammar-backend", "llguidance", "--random-seed", "0",
                "--sampling-defaults", "openai"]  # docs/reproduce.md, section 9: not generation_config.json's


LAUNCHER = SglangLauncher  # what launchers.launcher('sglang') builds
