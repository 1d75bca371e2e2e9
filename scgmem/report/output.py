"""Report outputs are written, never followed: a symlink (or a FIFO) where a table, figure or
rescored file goes is refused in one line (`UnsafeLink`, exit 2), so a planted `costs.md -> ~/.bashrc`
cannot make `scgmem-report` overwrite what it points at. The output folder itself is the user's
choice and may be a link."""
from __future__ import annotations

from pathlib import Path

from scgmem.harness.safe_files import open_nofollow


def open_output(path: Path, binary: bool = False):
    """`path` opened for writing (created or truncated); a link or special file there is refused."""
    if binary:
        return open_nofollow(Path(path), "wb")
    return open_nofollow(Path(path), "w")


def write_output(path: Path, text: str) -> Path:
    with open_output(path) as f:
        f.write(text)
    return Path(path)
