"""Names from data files that become file names: one rule where they enter, one check where a
path is built.

A LoCoMo `sample_id` names the memory export (`memory/<sample_id>.json`) and the memory cache
entry (`<cache>/memory/<method>/<key>/<sample_id>.json`). The data file is untrusted input: an id
such as `../../evil` or `/home/me/.bashrc` would otherwise write outside the run. So
- the loader refuses any id that is not a SAFE_NAME (first defence, with a one-line error), and
- every path built from such a name goes through `path_under`, which checks the name again and
  that the resolved path stays below its root (second defence, for call sites added later).
"""
from __future__ import annotations

import re
from pathlib import Path

SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
SAFE_NAME_RULE = "1-128 characters from A-Z a-z 0-9 . _ -, and not '.' or '..'"


class UnsafePath(ValueError):
    """A data-derived name that could leave its folder; str(e) is the one-line message."""


def is_safe_name(value: object) -> bool:
    """Whether `value` may name a file or folder: a SAFE_NAME string other than '.' and '..'."""
    return isinstance(value, str) and value not in (".", "..") and SAFE_NAME.fullmatch(value) is not None


def path_under(root: str | Path, *names: str) -> Path:
    """root / names[0] / names[1] ..., refused unless each name is safe and the resolved path
    lies below the resolved root.

    >>> path_under("/tmp/run/memory", "conv-26.json").name
    'conv-26.json'
    >>> path_under("/tmp/run/memory", "../evil.json")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    UnsafePath: /tmp/run/memory: '../evil.json' cannot name a file (1-128 characters from A-Z a-z 0-9 . _ -, and not '.' or '..')
    """
    root = Path(root)
    for name in names:
        if not is_safe_name(name):
            raise UnsafePath(f"{root}: {name!r} cannot name a file ({SAFE_NAME_RULE})")
    path = root.joinpath(*names)
    if not path.resolve().is_relative_to(root.resolve()):
        raise UnsafePath(f"{root}: {path} would lie outside it")
    return path
