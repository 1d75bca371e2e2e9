"""Lenient JSON parsing for small models: MemGPT's `clean_json`, shared by the baselines.

docs/methods.md, "JSON replies"; after MemGPT's
`memgpt/local_llm/json_parser.py::clean_json` (tag 0.3.25). Strategies, tried in order:

1. ``direct``: strip code fences, then ``json.loads``;
2. ``completed``: append ``}``, ``}}`` or ``"}}`` (a generation cut at max_new_tokens usually
   lacks only its closing braces), first as is, then after stripping a trailing comma;
3. ``balanced``: parse the first balanced ``{...}`` (string-aware brace matching; handles
   prose around the object and two objects back to back);
4. give up: ``None``. Every call site must survive ``None``.

Only JSON *objects* count as success: every call site wants a dict, and a bare string or
number that happens to parse (``"42"``) is not an answer to any of our prompts.

Example::

    clean_json('```json\\n{"a": 1}\\n```')           # {'a': 1}
    clean_json('{"function": "send_message", "params": {"message": "hi"')   # completed
    clean_json_with_strategy('Sure! {"a": 1} done')  # ({'a': 1}, 'balanced')
    clean_json("no json here")                        # None
"""
from __future__ import annotations

import json
import re
from typing import Any

_FENCE_OPEN = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?")
_FENCE_CLOSE = re.compile(r"\n?\s*```\s*$")

# The suffixes of strategy 2, in MemGPT's order.
_COMPLETIONS = ("}", "}}", '"}}')


def strip_code_fences(text: str) -> str:
    """Remove a leading ```json (or ```) fence and a trailing ``` fence."""
    text = _FENCE_OPEN.sub("", text.strip())
    return _FENCE_CLOSE.sub("", text).strip()


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def first_balanced_object(text: str) -> dict[str, Any] | None:
    """The first substring `{...}` with balanced braces (outside strings) that parses as an object."""
    start = text.find("{")
    while start != -1:
        depth, in_string, escape = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                elif ch == '"':
                    in_string = False
                continue
            if ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    parsed = _loads_object(text[start:i + 1])
                    if parsed is not None:
                        return parsed
                    break  # balanced but not JSON: try the next opening brace
        start = text.find("{", start + 1)
    return None


def clean_json_with_strategy(text: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Parse `text` leniently; returns (object, strategy name) or (None, None).

    The strategy names are "direct", "completed" and "balanced", so callers can count which repair was needed.
    """
    if not text or not text.strip():
        return None, None
    stripped = strip_code_fences(text)
    parsed = _loads_object(stripped)
    if parsed is not None:
        return parsed, "direct"
    for base in (stripped, stripped.rstrip().rstrip(",")):
        for suffix in _COMPLETIONS:
            parsed = _loads_object(base + suffix)
            if parsed is not None:
                return parsed, "completed"
    parsed = first_balanced_object(stripped)
    if parsed is not None:
        return parsed, "balanced"
    return None, None


def clean_json(text: str | None) -> dict[str, Any] | None:
    """Parse `text` as a JSON object with MemGPT's repair strategies; None if all fail."""
    return clean_json_with_strategy(text)[0]
