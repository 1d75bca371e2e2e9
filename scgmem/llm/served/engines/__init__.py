"""Serving engines by name: `model.engine=<name>` is the dialect in scgmem/llm/served/engines/<name>.py.

Adding an engine is adding that one file (and, for the harness to start it, its launcher in
scgmem/llm/served/launchers/<name>.py): an `EngineDialect` subclass whose `name` is the file's
name, decorated with `@register_engine`. Nothing else lists the engines, as
lm-evaluation-harness maps a backend's name to its module and imports it only when it is asked
for (lm_eval/models/__init__.py):

* `names()` reads the engines off the package folder: a module is an engine when a line of it
  starts with the decorator. Its source is read, not imported, so listing loads no engine;
* `dialect_class(name)` imports the one module asked for and checks that it registered `name`;
* `make_dialect` builds one from `model.engine` and `model.engine_options`; every message that
  names the engines is built from `names()`.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from scgmem.llm.served.engines.dialect import EngineDialect

_REGISTERED: dict[str, type[EngineDialect]] = {}
_DECORATOR = re.compile(r"^@register_engine\b", re.MULTILINE)


def register_engine(cls: type[EngineDialect]) -> type[EngineDialect]:
    """Class decorator of an engine dialect; its `name` must be its module's file name."""
    if not (isinstance(cls, type) and issubclass(cls, EngineDialect)):
        raise TypeError(f"register_engine: {cls!r} is not an EngineDialect subclass")
    stem = cls.__module__.rpartition(".")[2]
    if cls.name != stem:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__}: name {cls.name!r} must be the file's name {stem!r} "
                        f"(model.engine=<name> imports scgmem/llm/served/engines/<name>.py)")
    _REGISTERED[cls.name] = cls
    return cls


def names() -> list[str]:
    """The engines, sorted: the modules of the package folder(s) that register a dialect."""
    found = set()
    for info in pkgutil.iter_modules(__path__):
        path = Path(info.module_finder.path) / f"{info.name}.py"
        if not info.ispkg and path.is_file() and _DECORATOR.search(path.read_text(encoding="utf-8")):
            found.add(info.name)
    return sorted(found)


def one_of() -> str:
    """'llamacpp|sglang|vllm': the engines as a `model.engine=` value in messages."""
    return "|".join(names())


def needs_engine(what: str) -> str:
    """The one-line refusal of a constrained call on a server without `model.engine`."""
    return (f"{what} on a server needs model.engine={one_of()} (its schema constraint as an llguidance token-id "
            "grammar) and model.tokenizer; or use the local backend")


def dialect_class(name: str) -> type[EngineDialect]:
    """The dialect registered as `name`, its module imported on first use."""
    if not isinstance(name, str) or name not in names():
        raise ValueError(f"model.engine must be one of {names()}, got {name!r}")
    if name not in _REGISTERED:
        importlib.import_module(f"{__name__}.{name}")
    if name not in _REGISTERED:  # the decorator's line is there, but it registered another class
        raise ValueError(f"model.engine={name}: scgmem/llm/served/engines/{name}.py registers no dialect named {name!r}")
    return _REGISTERED[name]


def make_dialect(engine: str, model_id: str, options: dict | None = None) -> EngineDialect:
    """The dialect of `model.engine` (`options`: the dialect's keywords, `model.engine_options`)."""
    cls = dialect_class(engine)
    try:
        return cls(model_id, **dict(options or {}))
    except TypeError as e:
        raise ValueError(f"model.engine_options: {e}") from None
