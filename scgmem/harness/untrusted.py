"""Reading back what the harness wrote: every file is input, checked where it enters.

A run directory and the memory cache hold the harness's own earlier outputs, but anything may
have changed them since: a crash, a full disk, a colleague's script, a planted file. So each
reader checks type, range, size and depth against what the harness itself writes, and refuses
anything else with one line (`StoredFileError`, exit 2)::

    <file>: <field>: <value>: <why>

The value is shown short and with control characters escaped, so a hostile file cannot write to
the terminal. docs/validation.md lists, per file, what is checked.
"""
from __future__ import annotations

import json
import math
from typing import Any


class StoredFileError(ValueError):
    """A file the harness reads back is not what it would have written; str(e) is the one line
    `<file>: <field>: <value>: <why>` the runner prints (exit code 2)."""

    def __init__(self, path, field: str, value, why: str) -> None:
        super().__init__(one_line(f"{path}: {field}: {shown(value)}: {why}"))


def one_line(text: str) -> str:
    """`text` with control characters (newlines, escape sequences) written as \\xNN: field names
    come from the file's own keys, and a terminal must never receive its bytes raw."""
    return "".join(ch if ch.isprintable() or ch == " " else f"\\x{ord(ch):02x}" if ord(ch) < 256
                   else f"\\u{ord(ch):04x}" for ch in text)


def shown(value, limit: int = 60) -> str:
    """`value` as a short one-line repr: control characters escaped by repr, long values cut."""
    try:
        text = repr(value)
    except RecursionError:  # a structure nested past Python's limit
        text = f"<{type(value).__name__} nested too deeply>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


# Deep enough for every structure the harness writes (cache entries nest 6 levels; run.json 4), far
# below Python's recursion limit, so checks that recurse never overflow.
MAX_DEPTH = 32


def depth(obj, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a JSON value (a scalar is 0), counted without recursion; stops past `limit`."""
    deepest, stack = 0, [(obj, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            level += 1
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            stack.extend((v, level) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def parse_json(text: str | bytes, path, field: str = "file", max_depth: int = MAX_DEPTH):
    """json.loads(text), refused in one line when it is not JSON, nests past `max_depth` or holds
    a number JSON allows but Python cannot hold (NaN and Infinity are refused too)."""
    def no_constant(name: str):
        raise ValueError(f"{name} is not a JSON number")

    try:
        obj = json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise StoredFileError(path, field, f"{len(text)} bytes", f"nested deeper than {max_depth}") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, int too long, NaN, bad UTF-8
        raise StoredFileError(path, field, str(e), "not valid JSON") from None
    if depth(obj, max_depth) > max_depth:
        raise StoredFileError(path, field, f"{len(text)} bytes", f"nested deeper than {max_depth}")
    return obj


# -- field checks: each returns the value or raises StoredFileError naming file and field ----------

def need_dict(obj, path, field: str) -> dict:
    if not isinstance(obj, dict):
        raise StoredFileError(path, field, obj, f"must be a JSON object, not {type(obj).__name__}")
    return obj


def need_int(obj, path, field: str, low: int = 0, high: int = 10**15) -> int:
    if not isinstance(obj, int) or isinstance(obj, bool) or not low <= obj <= high:
        raise StoredFileError(path, field, obj, f"must be an integer in [{low}, {high}]")
    return obj


def need_number(obj, path, field: str, low: float = 0.0, high: float = 1e15) -> float:
    if not isinstance(obj, (int, float)) or isinstance(obj, bool) or not math.isfinite(obj) \
            or not low <= obj <= high:
        raise StoredFileError(path, field, obj, f"must be a finite number in [{low:g}, {high:g}]")
    return obj


def need_str(obj, path, field: str, max_len: int = 1 << 20) -> str:
    if not isinstance(obj, str) or len(obj) > max_len:
        raise StoredFileError(path, field, obj if not isinstance(obj, str) else f"{len(obj)} characters",
                              f"must be a string of at most {max_len} characters")
    return obj


def need_counts(obj, path, field: str, high: int = 10**15) -> dict[str, int]:
    """{name: non-negative int}: usage counters, deviations."""
    for key, n in need_dict(obj, path, field).items():
        need_int(n, path, f"{field}.{key}", 0, high)
    return obj


def need_usage(obj, path, field: str, high: int = 10**15) -> dict[str, dict[str, int]]:
    """{phase: {counter: non-negative int}}: what `scgmem.llm.usage.UsageMeter.snapshot` writes."""
    for phase, counts in need_dict(obj, path, field).items():
        need_counts(counts, path, f"{field}.{phase}", high)
    return obj


def walk(obj: Any):
    """Every (dotted path, value) of a JSON value, without recursion (depth-checked values only)."""
    stack = [("", obj)]
    while stack:
        where, node = stack.pop()
        yield where, node
        if isinstance(node, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))
