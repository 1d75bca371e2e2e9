"""Checks of command-line overrides that Hydra would otherwise report as a multi-line traceback
(exit 1): an unknown group option (`model=gpt5`), an unknown group (`+experment=x`) and a setting
that does not exist (`run.progres=false`, found by composing the config once, as Hydra will)."""
from __future__ import annotations

from pathlib import Path

GROUPS = ("model", "backend", "method", "data", "protocol", "embedder", "logger", "experiment", "launcher")


def _search_dirs(argv: list[str], config_dir: Path) -> list[Path]:
    """The config dir and every `file://` folder of a `hydra.searchpath=[...]` override (where a
    user's own groups, e.g. configs/data/<dataset>.yaml of a new benchmark, may live)."""
    dirs = [config_dir]
    for arg in argv:
        if arg.startswith("hydra.searchpath="):
            value = arg.split("=", 1)[1].strip("[]")
            dirs += [Path(v.strip().strip("'\"")[len("file://"):]) for v in value.split(",")
                     if v.strip().strip("'\"").startswith("file://")]
    return dirs


def check_overrides(argv: list[str], config_dir: Path) -> str | None:
    """Return a one-line problem for an unknown group option (e.g. `model=gpt5`), else None."""
    dirs = _search_dirs(argv, config_dir)
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if arg.startswith("+") and not arg.startswith("++") and "." not in key and "/" not in key \
                and not any((d / key[1:]).is_dir() for d in dirs):
            # `+experment=table1` would add an unread top-level value and run without the experiment
            groups = sorted({p.name for d in dirs for p in d.iterdir() if p.is_dir()})
            return f"{key}: no config group {key[1:]!r}; choose one of {', '.join(groups)}"
        key = key.lstrip("+~")
        if key.startswith("hydra/"):
            key = key[len("hydra/"):]
        if key not in GROUPS:
            continue
        known = sorted({p.stem for d in dirs for p in (d / key).glob("*.yaml")})
        for choice in _choices(value):
            if choice not in known:
                return f"{key}={choice}: unknown {key}; choose one of {', '.join(known)}"
    return None


def check_keys(argv: list[str], config_dir: Path) -> str | None:
    """Compose the config with the overrides of `argv` (a sweep's first value of each) and return a
    one-line problem when Hydra cannot apply one (a misspelled key), else None. Errors of another
    kind (syntax, launcher plugins) are left to Hydra's own report."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import ConfigCompositionException, HydraException

    try:
        overrides = OverridesParser.create().parse_overrides([a for a in argv if not a.startswith("-") and "=" in a])  # not --cfg's `job`
    except HydraException:
        return None
    lines = []
    for o in overrides:
        if o.key_or_group.startswith("hydra") and not o.key_or_group.startswith("hydra.searchpath"):
            continue  # run dirs, launchers and sweepers: Hydra's own settings, checked by Hydra
        lines.append(f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
                     else o.input_line)
    if GlobalHydra.instance().is_initialized():  # a caller's Hydra (tests): leave it alone
        return None
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(config_name="config", overrides=lines)
    except ConfigCompositionException as e:
        cause = " ".join(str(e.__cause__ or "").split("\n")[0].split())
        first = " ".join(str(e).split("\n")[0].split())
        bad = next((line for line in lines if f"'{line.split('=', 1)[0].lstrip('+~')}'" in first), None)
        if bad is not None and "not in struct" in cause:
            key = bad.split("=", 1)[0].lstrip("+~")
            return (f"{bad}: no such setting ({cause.rstrip('.')}); check the spelling, or write +{key}=... "
                    "to add a new one")
        return f"{first}{' (' + cause + ')' if cause else ''}"
    except Exception:  # noqa: BLE001 - any other failure is Hydra's to report, as before
        return None
    return check_backend(cfg) or check_base_url(cfg) or check_method_model(cfg)


def check_base_url(cfg) -> str | None:
    """A bad `model.base_url` (no http(s) scheme or host, credentials in it) as one line, before
    Hydra writes the config, and with it a password, into .hydra/ (scgmem/llm/served/http_client.py)."""
    from omegaconf import OmegaConf

    from scgmem.llm.served.http_client import parse_base_urls

    node = served_node(cfg)
    url = OmegaConf.select(node, "base_url", default=None, throw_on_missing=False)
    if url is None or url == "???" or "base_url" not in node:
        return None
    try:
        parse_base_urls(OmegaConf.to_container(url) if OmegaConf.is_config(url) else url)
    except ValueError as e:
        return str(e)
    return None


def _choices(value: str) -> list[str]:
    """Values of a (multirun) override: `a,b`, `choice(a,b)`, or one value."""
    value = value.strip()
    if value.startswith("choice(") and value.endswith(")"):
        value = value[len("choice("):-1]
    return [v.strip() for v in value.split(",") if v.strip() and not v.strip().startswith(("glob(", "range("))]


def method_needs(cfg):
    """The configured method's `Needs` (scgmem.llm.protocol), read off its class without building it;
    a target that does not import has none here (building the method reports it in one line)."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    from scgmem.llm.protocol import Needs

    target = OmegaConf.select(cfg, "method._target_", default=None)
    try:
        return getattr(get_class(str(target)), "needs", Needs()) if target else Needs()
    except Exception:  # noqa: BLE001 (any import failure is reported where the method is built)
        return Needs()


def check_method_model(cfg) -> str | None:
    """A method that needs constrained decoding on a served model without a grammar engine, as one line
    from the config alone, before any data, model or embedder loads: a model config with an `engine`
    setting left null."""
    needs = method_needs(cfg)
    model = served_node(cfg)
    if needs.constraints and "engine" in model and model.get("engine") is None:
        from scgmem.llm.served.engines import needs_engine

        line = needs_engine(needs.by)
        return line.replace("model.", "backend.llm.") if model is not cfg.get("model") else line
    return None


def served_node(cfg):
    """The node a run instantiates as its model: `backend.llm` when a served backend is chosen, else
    `model`; what scgmem/harness/run.py instantiates, and what the checks here read."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, "backend.llm", default=None)
    return node if node is not None else (cfg.get("model") or {})


def check_backend(cfg) -> str | None:
    """A served backend on a model config that is already a server's (model=vllm backend=vllm), or on
    one that names no weights, or whose client settings do not resolve: one line, before anything
    loads and before any server starts."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    backend = cfg.get("backend") or {}
    if backend.get("llm") is None:
        return None
    name = backend.get("name")
    if "base_url" in (cfg.get("model") or {}):
        return (f"backend={name}: this model config is already a server's (model.base_url); choose backend=local "
                "with it, or a model config with a served backend (model=qwen2.5-3b backend=vllm)")
    try:
        OmegaConf.to_container(backend.serve, resolve=True)
        OmegaConf.to_container(backend.llm, resolve=True)
    except OmegaConfBaseException as e:
        cause = e.__cause__ if e.__cause__ is not None else e
        line = " ".join(str(cause).split("\n")[0].split()).split(" full_key:")[0]
        return line.split("while resolving interpolation: ", 1)[-1]
    return None
