"""What a served sweep (scgmem/harness/served_sweep.py) will do for each model, worked out from the
configs alone: the model's composed config checked as `scgmem-run` would check it (one line per
problem, scgmem/harness/cli_checks.py), what its server serves (the backend's `serve` node), how many
runs the experiment makes on it, and whether they all finished in an earlier launch.

    plans = plan_models(CONFIG_DIR, "table1", "vllm", ["standin-qwen2.5"], ["data.samples=[conv-26]"])
    plans[0].spec.model, plans[0].jobs     # ('/.../.cache/standins/standin-qwen2.5', 6)
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from scgmem.config_resolvers import model_folder
from scgmem.llm.served.launchers import ServeSpec, run_overrides


class PlanError(ValueError):
    """A sweep that cannot run as asked; str(e) is the one line shown (exit 2)."""


@dataclass
class ModelPlan:
    model: str                       # the model config's name (configs/model/<model>.yaml)
    backend: str
    spec: ServeSpec
    jobs: int                        # runs of the experiment on this model
    defaults: list[str] = field(default_factory=list)  # overrides the sweep adds (conversations in flight)
    port: int | None = None
    url: str | None = None           # a server already running (BASE_URLS)
    url_overrides: list[str] = field(default_factory=list)
    overrides_seen: list[str] = field(default_factory=list)  # the user's overrides (SLICE): part of `finished`

    @property
    def folder(self) -> str:
        """The model's folder in the sweep (the runs' and the server log's name): `<model>@<backend>`."""
        return model_folder(self.model, self.backend)

    def use_url(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.url_overrides = run_overrides(self.url)

    def check_url(self, timeout_s: float = 30.0) -> None:
        """A server of BASE_URLS answers GET /models; the model id it serves is taken from there when
        it is not the model's name (a cluster's server often serves the hub id)."""
        if self.url is None:
            return
        from scgmem.llm.served.http_client import JsonClient, ServerError, listed_models

        try:
            ids = listed_models(JsonClient(self.url, timeout_s=timeout_s, retries=0))
        except (ServerError, ValueError) as e:
            raise PlanError(f"BASE_URLS: {self.url}/models did not answer with a model list ({e})") from None
        if self.spec.served_name in ids:
            return
        if len(ids) != 1:
            raise PlanError(f"BASE_URLS: {self.url} serves {ids or 'no model'}, not {self.spec.served_name}; "
                            "give the URL of a server of this model")
        self.url_overrides.append(f"backend.llm.model_id={ids[0]}")

    def marker(self, sweep_dir: str | Path) -> Path:
        return Path(sweep_dir) / "servers" / f"{self.folder}.done"

    def finished(self, sweep_dir: str | Path) -> bool:
        """True when an earlier launch finished every run of this model with the same overrides."""
        marker = self.marker(sweep_dir)
        return marker.is_file() and marker.read_text() == self.fingerprint()

    def fingerprint(self) -> str:
        return json.dumps({"model": self.model, "backend": self.backend, "jobs": self.jobs,
                           "overrides": self.overrides_seen}, sort_keys=True)


def _sweep_values(value: str) -> int:
    """How many values a sweep override holds: `a,b,c` is 3; `[x,y]` (a list value) and `x` are 1."""
    depth, count = 0, 1
    for char in str(value):
        depth += char in "[({"
        depth -= char in "])}"
        count += char == "," and depth == 0
    return count


def _compose(config_dir: Path, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def plan_models(config_dir: Path, experiment: str, backend: str, models: list[str], extra: list[str]) -> list[ModelPlan]:
    """One plan per model (`models`, default: the experiment's own), every model's config checked."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from scgmem.harness.cli_checks import check_keys, check_overrides

    base = [f"+experiment={experiment}", f"backend={backend}"]
    problem = check_overrides(base + [f"model={m}" for m in models] + extra, config_dir)
    if problem:
        raise PlanError(problem)
    hydra_cfg = _compose(config_dir, base).hydra
    params = {str(k): str(v) for k, v in (OmegaConf.to_container(hydra_cfg.sweeper.params) or {}).items()}
    if not models:
        models = [m.strip() for m in params.get("model", hydra_cfg.runtime.choices.model).split(",")]
    for override in extra:  # the command line replaces or adds sweep entries, as BasicSweeper does
        key, _, value = override.partition("=")
        if key.lstrip("+~") in params or _sweep_values(value) > 1:
            params[key.lstrip("+~")] = value
    jobs = math.prod(_sweep_values(v) for k, v in params.items() if k != "model")
    plans = []
    for model in models:
        overrides = [*base, f"model={model}", *extra]
        problem = check_keys(overrides, config_dir)
        if problem:
            raise PlanError(f"model={model}: {problem}" if not problem.startswith("model=") else problem)
        cfg = _compose(config_dir, overrides)
        try:
            serve = OmegaConf.to_container(cfg.backend.serve, resolve=True)
        except OmegaConfBaseException as e:
            raise PlanError(f"model={model} backend={backend}: {str(e.__cause__ or e).splitlines()[0]}") from None
        spec = ServeSpec.of(serve)
        if spec.model.startswith(("/", "./", "~")) and not Path(spec.model).expanduser().is_dir():
            hint = " (make standins)" if "standin" in model else ""
            raise PlanError(f"model={model}: model.path={spec.model} is not a model folder{hint}")
        defaults = []
        if not any(o.partition("=")[0] == "run.parallel_conversations" for o in extra):
            samples = OmegaConf.select(cfg, "data.samples")
            defaults.append(f"run.parallel_conversations={len(samples) if samples else 10}")  # LoCoMo has 10
        plans.append(ModelPlan(model=model, backend=backend, spec=spec, jobs=jobs, defaults=defaults,
                               overrides_seen=sorted(extra)))
    return plans
