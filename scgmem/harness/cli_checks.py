"""Checks of command-line overrides that Hydra would otherwise report as a multi-line traceback."""
from __future__ import annotations

from pathlib import Path

GROUPS = ("model", "method", "data", "protocol", "embedder", "logger", "experiment", "launcher")


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


def _choices(value: str) -> list[str]:
    """Values of a (multirun) override: `a,b`, `choice(a,b)`, or one value."""
    value = value.strip()
    if value.startswith("choice(") and value.endswith(")"):
        value = value[len("choice("):-1]
    return [v.strip() for v in value.split(",") if v.strip() and not v.strip().startswith(("glob(", "range("))]
