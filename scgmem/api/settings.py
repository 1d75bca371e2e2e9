"""Checks of a method's settings, made once where they enter (the method's `__init__`).

Every failure is one ValueError in one form, naming the config key the user typed:
``method.<name> must be <what>, got <value>``. Each check returns the value, so a constructor
can check and assign in one line.
"""
from __future__ import annotations

from collections.abc import Sequence
from numbers import Real
from typing import Any


def setting_error(name: str, must: str, value: Any) -> ValueError:
    """The one message form, for a rule the checks below do not cover (a prompt's slot, a
    setting another one needs)."""
    return ValueError(f"method.{name} must be {must}, got {value!r}")


def check_int(name: str, value: Any, low: int = 1, *, allow_none: bool = False) -> Any:
    """An int (a bool is not one) >= low; None too with allow_none."""
    if allow_none and value is None:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        what = "a positive int" if low == 1 else f"an int >= {low}"
        raise setting_error(name, f"None or {what}" if allow_none else what, value)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def check_positive(name: str, value: Any) -> Any:
    """A number > 0 (int or float)."""
    if not _is_number(value) or not value > 0:
        raise setting_error(name, "> 0", value)
    return value


def check_range(name: str, value: Any, low: float, high: float, *, open_low: bool = False,
                open_high: bool = False, high_name: str | None = None) -> Any:
    """A number in [low, high] (open ends with open_low / open_high); high_name names a bound
    that is another setting, e.g. "word_limit"."""
    inside = _is_number(value) and (value > low if open_low else value >= low) and \
        (value < high if open_high else value <= high)
    if not inside:
        bound = f"{high_name}={high}" if high_name else f"{high}"
        raise setting_error(name, f"in {'(' if open_low else '['}{low}, {bound}{')' if open_high else ']'}", value)
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> Any:
    """One of `choices`."""
    if value not in choices:
        quoted = [repr(c) for c in choices]
        raise setting_error(name, " or ".join(quoted) if len(quoted) == 2 else f"one of {', '.join(quoted)}", value)
    return value


def check_slot(name: str, value: Any, slot: str) -> Any:
    """A prompt text with the placeholder `slot` (e.g. "{question}") that the method fills."""
    if not isinstance(value, str) or slot not in value:
        raise setting_error(name, f"a text containing '{slot}'", value)
    return value


def check_embedder(method: str, embedder: Any, why: str = "") -> None:
    """The method needs an embedder (`why`: what for); the config gave none."""
    if embedder is None:
        raise ValueError(f"method={method} needs an embedder{f' ({why})' if why else ''}: set embedder=minilm "
                         "(or another embedder config), got embedder=None")


def check_bool(name: str, value: Any) -> bool:
    """true or false (YAML's booleans), not a string or a number."""
    if not isinstance(value, bool):
        raise setting_error(name, "true or false", value)
    return value
