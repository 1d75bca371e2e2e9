"""Writing into a run directory and the memory cache without following planted symlinks, and
without leaving temporary files behind when the disk fills.

A symlink inside a run directory (`memory/`, `predictions.jsonl`, `run.log`, ...) or below the
cache root would make the harness write wherever it points. Two checks keep writes inside:

- `check_run_dir_links` (before anything is written): no symlink anywhere in the run directory
  may lead outside it, and none may stand where the harness writes its own files (OWN_NAMES);
- `check_below` / `open_nofollow` (at each write): no component between the root and the file
  is a symlink, and the file itself is opened with O_NOFOLLOW (a link planted after the scan
  fails with ELOOP instead of being followed).

The roots themselves (`hydra.run.dir`, `run.cache_dir`) are the user's choice and may be links.
What remains open: a link planted in the instant between a check and the write (no O_NOFOLLOW
for parent directories in Python's open); docs/validation.md lists it.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path

from scgmem.harness.untrusted import MAX_DEPTH, StoredFileError, parse_json

# Files and folders the harness (and Hydra for it) writes into a run directory: none may be a
# symlink, wherever it points. Anything else (wandb's `latest-run`) may link within the directory.
OWN_NAMES = {"predictions.jsonl", "usage.jsonl", "run.json", "summary.json", "run.log", "memory", ".hydra",
             "wandb_run.json", "requests.jsonl", "judgements.jsonl", "judge.json", "judge_summary.json", ".run.lock",
             "config.yaml", "hydra.yaml", "overrides.yaml"}

# Errors of a full or read-only disk: reported in one line (the runner exits 2), never a traceback.
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


class UnsafeLink(StoredFileError):
    """A symlink where the harness reads or writes; str(e) is the one line."""


# wandb (logger=wandb) writes these links itself, pointing into its own folders (latest-run at the
# newest run-* folder, the debug logs into ~/.cache/wandb): allowed below <run dir>/wandb/ only,
# wherever they point. The harness never reads or writes through them.
WANDB_LINKS = {"latest-run", "debug.log", "debug-internal.log", "debug-core.log"}


def _wandb_link(run_dir: Path, path: Path) -> bool:
    parts = path.relative_to(run_dir).parts
    return len(parts) >= 2 and parts[0] == "wandb" and path.name in WANDB_LINKS


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


class SpecialFile(StoredFileError):
    """A FIFO, socket or device where the harness reads or writes a file; str(e) is the one line."""

    def __init__(self, path, mode: int) -> None:
        super().__init__(path, "file", _kind(mode), "the harness reads and writes regular files only; "
                         "remove it")


def check_run_dir_links(run_dir: Path) -> None:
    """Refuse a run directory holding a symlink that leads outside it, any symlink named like a
    file the harness writes, or a FIFO, socket or device (reading one blocks or never ends). The
    directory itself may be a link (the user chose it); wandb's own links (WANDB_LINKS) are allowed
    below wandb/."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    root = run_dir.resolve()
    for folder, dirs, files in os.walk(run_dir, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            mode = os.lstat(path).st_mode  # never opened: opening a FIFO blocks
            if not stat.S_ISLNK(mode):
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise SpecialFile(path, mode)
                continue
            target = os.readlink(path)
            if name in OWN_NAMES:
                raise UnsafeLink(path, "symlink", target, "the harness writes this file itself; remove the link")
            if _wandb_link(run_dir, path):
                continue
            if not path.resolve().is_relative_to(root):
                raise UnsafeLink(path, "symlink", target, f"leads outside the run directory {run_dir}")


def check_below(root: Path, path: Path) -> Path:
    """`path`, refused when any component between `root` (excluded) and `path` (included) is a
    symlink or `path` is not below `root`."""
    root, path = Path(root), Path(path)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise UnsafeLink(path, "path", str(path), f"not below {root}") from None
    node = root
    for part in parts:
        node = node / part
        if node.is_symlink():
            raise UnsafeLink(node, "symlink", os.readlink(node), f"below {root}, where the harness writes; "
                             "remove the link")
    return path


def open_nofollow(path: Path, mode: str = "r", *, exclusive: bool = False):
    """open(path, mode) that fails instead of following a symlink at `path` itself. Modes: r, rb, r+b,
    a, ab, w, wb (w: created, and with `exclusive` never an existing file)."""
    binary = "b" in mode
    flags = {"r": os.O_RDONLY, "r+": os.O_RDWR, "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
             "w": os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)}[mode.replace("b", "")]
    fd = open_fd(path, flags)
    return os.fdopen(fd, mode, **({} if binary else {"encoding": "utf-8"}))


def open_fd(path: Path, flags: int, perm: int = 0o644) -> int:
    """os.open(path, flags) that neither follows a symlink at `path` nor blocks on a FIFO (opened
    non-blocking, then refused unless it is a regular file); the descriptor is blocking again."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), perm)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeLink(path, "symlink", os.readlink(path) if os.path.islink(path) else "?",
                             "refused to follow it; remove the link") from None
        if e.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise SpecialFile(path, os.lstat(path).st_mode) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SpecialFile(path, mode)
    os.set_blocking(fd, True)
    return fd


def read_bounded(path: Path, max_bytes: int, field: str = "file") -> bytes:
    """The bytes of `path`, refused when larger than `max_bytes` (a stray file is never read
    whole into memory). The last component must not be a symlink."""
    with open_nofollow(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise StoredFileError(path, field, f"more than {max_bytes} bytes", "larger than the harness writes")
    return data


def read_json_file(path: Path, max_bytes: int, max_depth: int = MAX_DEPTH):
    """A whole JSON file (run.json, a cache entry), with the checks of `read_bounded` and `parse_json`."""
    return parse_json(read_bounded(path, max_bytes), path, max_depth=max_depth)


def write_json_atomic(path: Path, obj, root: Path | None = None) -> None:
    """Write JSON via a temporary sibling and rename, so a reader never sees half a file; the
    temporary file is removed when the write fails (a full disk leaves nothing behind). With
    `root`, no component below it may be a symlink."""
    path = Path(path)
    if root is not None:
        check_below(root, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():  # os.replace would swap the link itself, but say so rather than hide it
        raise UnsafeLink(path, "symlink", os.readlink(path), "the harness writes this file itself; remove the link")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # left by a killed process of the same pid: never followed, never reused
    try:
        with open_nofollow(tmp, "w", exclusive=True) as f:
            json.dump(obj, f, ensure_ascii=False, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and e.filename is None:
            e.filename = str(path)  # the one-line error names the file
        raise


def disk_error(e: BaseException) -> str | None:
    """One line for an error of a full or read-only disk, None for any other error."""
    if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
        return f"{e.filename or 'a file'}: write: {os.strerror(e.errno)}: free space (or make it writable) " \
               "and rerun the same command; what was written before is kept"
    return None
