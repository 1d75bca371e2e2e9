"""Starting and stopping a local serving engine: one bounded /health wait and one pid file, for
every engine the project can start (the launchers beside this file: llamacpp.py, vllm.py, sglang.py)
and for the tests that start them. The pid file names the process by its number, start time and command line,
and nothing is signalled that is not the launcher's own server (`read_pid`); pid file and log are
opened without following links.

Imports nothing heavy: the launchers run before any model is loaded, and `make vllm` must answer
in seconds when the server is already up.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import stat
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable


class EngineStartError(RuntimeError):
    """The engine exited or stayed unhealthy; str(e) is one line naming the command's log."""


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when GET `url` answers 200 (any error, refused connection or other status: False)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return reply.status == 200
    except OSError:
        return False


def wait_healthy(proc: subprocess.Popen, url: str, *, wait_s: float, what: str, log: Path | str | None = None,
                 poll_s: float = 0.5) -> None:
    """Wait until `url` answers 200, at most `wait_s`; an exited or still-unhealthy `proc` is killed
    and named in one line (`EngineStartError`), with its log file when there is one."""
    where = f" (log: {log})" if log else ""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineStartError(f"{what} exited with code {proc.returncode} before answering {url}{where}")
        if healthy(url):
            return
        time.sleep(poll_s)
    stop_process(proc)
    raise EngineStartError(f"{what} did not answer {url} within {wait_s:.0f} s{where}")


def popen_logged(cmd: list[str], log: Path | str | None, *, env: dict | None = None) -> subprocess.Popen:
    """Start `cmd` in its own session (so that stopping its group stops its workers), stdout and
    stderr appended to `log` (discarded without one); every launcher starts its engine here."""
    out = open_log(Path(log)) if log else subprocess.DEVNULL  # never through a link planted at its path
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL, env=env,
                                start_new_session=True)
    finally:
        if log:
            out.close()


def stop_process(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the process group (the engine's workers too), SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(grace_s)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # started with start_new_session: the group is the engine and its workers
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# -- the pid file: which process is ours -----------------------------------------------------------
# A pid alone names whatever process holds that number now: after the server exits and the number is
# reused, `make vllm-stop` would signal a stranger's process group (and a file holding 0 the caller's
# own). So the file records what identifies the process beyond its number (its start time in clock
# ticks since boot, /proc/<pid>/stat field 22, and its command line), and a process is signalled only
# when both still match and its command line is the launcher's server on that port.

class NotOurServer(ValueError):
    """The pid file names no server of ours (a malformed file, pid 0/1, another process) or the port
    is held by something else; str(e) is one line."""


class StalePid(NotOurServer):
    """The pid file's number belongs to another process now (the server ended, the number was reused)."""


def _proc_identity(pid: int) -> tuple[str, list[str]] | None:
    """(start time, command line) of a live `pid`, or None when there is no such process."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = line[line.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return fields[19], [a.decode("utf-8", "replace") for a in cmdline.split(b"\0") if a]  # field 22 = starttime


def server_argv(module: str, port: int) -> Callable[[list[str]], bool]:
    """Whether a command line is the launcher's server: `python -m <module> ... --port <port>`."""
    def ours(argv: list[str]) -> bool:
        return module in argv and any(a == "--port" and b == str(port) for a, b in zip(argv, argv[1:]))
    return ours


def _open_nofollow(path: Path, flags: int) -> int:
    """os.open(path) refusing a symlink at `path` (O_NOFOLLOW) and anything but a regular file (a FIFO
    would block, a device would be written to): one line naming the file."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):
            raise NotOurServer(f"{path}: a symlink or special file, not the launcher's file; remove it") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotOurServer(f"{path}: not a regular file; remove it")
    os.set_blocking(fd, True)
    return fd


def open_log(log: Path):
    """The engine's log, opened for appending without following a link planted at its path."""
    return os.fdopen(_open_nofollow(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")


def check_state_dir(state: Path) -> None:
    """The folder of pid files and logs, created; a symlink there would send both elsewhere."""
    if state.is_symlink():
        raise NotOurServer(f"{state}: a symlink; the launcher writes its pid file and log only into a real folder")
    state.mkdir(parents=True, exist_ok=True)


def write_pid(pid_file: Path, pid: int) -> None:
    """Record `pid` with its start time and command line (JSON), never through a link."""
    check_state_dir(pid_file.parent)
    identity = _proc_identity(pid)
    if identity is None:
        raise EngineStartError(f"process {pid} exited before its pid file {pid_file} was written")
    data = json.dumps({"pid": pid, "start_time": identity[0], "cmdline": identity[1]}).encode() + b"\n"
    fd = _open_nofollow(pid_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def read_pid(pid_file: Path, ours: Callable[[list[str]], bool]) -> int | None:
    """The pid in `pid_file` when that process is alive and is the one the file recorded (same start
    time and command line, which `ours` accepts as the launcher's server, leading its own process
    group); None when there is no file or the process has ended. Anything else is `NotOurServer`, one
    line: a malformed file, pid 0, 1 or negative, or a number another process holds now."""
    if not os.path.lexists(pid_file):
        return None
    with os.fdopen(_open_nofollow(pid_file, os.O_RDONLY), "rb") as f:
        raw = f.read(1 << 16)
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("start_time"), str) \
            or not isinstance(record.get("cmdline"), list):
        raise NotOurServer(f"{pid_file}: does not identify a server (expected the launcher's JSON with pid, start "
                           f"time and command line, got {raw[:40]!r}); nothing signalled: stop the server yourself "
                           "and remove the file")
    pid = record.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        raise NotOurServer(f"{pid_file}: pid {pid!r} is not a server's process id (0, 1, negative and non-integer "
                           "pids are refused); nothing signalled")
    identity = _proc_identity(pid)
    if identity is None:
        return None
    if list(identity) != [record["start_time"], record["cmdline"]] or not ours(identity[1]):
        raise StalePid(f"{pid_file}: pid {pid} is now another process ({' '.join(identity[1])[:80]!r}), not the "
                       "server this file recorded; nothing signalled")
    try:
        if os.getpgid(pid) != pid:  # the launcher starts every server as the leader of its own session
            raise NotOurServer(f"{pid_file}: pid {pid} does not lead its process group; nothing signalled")
    except ProcessLookupError:
        return None
    return pid


def stop_pid_file(pid_file: Path, ours: Callable[[list[str]], bool], grace_s: float = 20.0) -> bool:
    """Stop the server group `pid_file` names (checked by `read_pid`; `NotOurServer` signals nothing)
    and remove the file; False when nothing ran."""
    pid = read_pid(pid_file, ours)
    if pid is None:
        pid_file.unlink(missing_ok=True)  # unlink never follows a link
        return False
    start_time = _proc_identity(pid)
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if _proc_identity(pid) != start_time:  # gone (or the number already reused: not ours to signal)
            break
        time.sleep(0.25)
    else:
        _signal_group(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def port_in_use(host: str, port: int) -> bool:
    """Whether `host`:`port` is taken (a server could not bind it): for `make vllm` and the served sweep."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def serves(port: int, model_id: str, timeout_s: float = 5.0) -> str | None:
    """None when 127.0.0.1:`port` answers /health and lists `model_id` in /v1/models; else why not."""
    from scgmem.llm.served.http_client import JsonClient, ServerError, listed_models

    if not healthy(f"http://127.0.0.1:{port}/health"):
        return "does not answer /health"
    try:
        listed = listed_models(JsonClient(f"http://127.0.0.1:{port}/v1", timeout_s=timeout_s, retries=0))
    except (ServerError, ValueError):
        return "answers no model list at /v1/models"
    return None if model_id in listed else f"serves {[str(m)[:60] for m in listed[:3]]}, not {model_id!r}"


def bring_up(what: str, port: int, state: Path, start: Callable[[Path], subprocess.Popen], *, stop: str,
             run_line: Callable[[], str], ours: Callable[[list[str]], bool], model_id: str,
             starting: str | None = None) -> int:
    """`make vllm` / `make llamacpp`: start an engine in the background on 127.0.0.1:`port` unless
    the server its pid file names (`read_pid` with `ours`) is alive and the port answers as that
    server with `model_id`; print where it is and the scgmem-run line for it (`run_line`, called once
    the server is up). Returns the server's pid. A port held by anything else is refused in one line
    (`NotOurServer`): its run line would send the run to a stranger.

    `start(log)` starts the engine, logging to `log`, and returns once it is healthy (raising
    `EngineStartError` otherwise); its pid goes to `state`/server-`port`.pid. `stop`: the command
    that stops it. `starting`: a line printed before a start that takes long enough to want one
    (e.g. "about 1-3 minutes on a CPU"), naming the log; without it the log is named once the
    engine is up, so each start names its log exactly once.
    """
    pid_file, log = state / f"server-{port}.pid", state / f"server-{port}.log"
    check_state_dir(state)
    try:
        pid = read_pid(pid_file, ours)
    except StalePid:
        pid = None  # the number belongs to another process now: the file is stale, nothing is signalled
    if pid is not None:
        problem = serves(port, model_id)
        if problem:
            raise NotOurServer(f"{what} (pid {pid}, {pid_file}) is running but 127.0.0.1:{port} {problem}; "
                               f"stop it with {stop}")
        print(f"{what} already up on 127.0.0.1:{port} (pid file {pid_file})")
    elif port_in_use("127.0.0.1", port):
        raise NotOurServer(f"127.0.0.1:{port} is in use by something else (no {what} server of {pid_file} holds it): "
                           "stop that service or choose another port")
    else:
        open_log(log).close()  # a link or special file at the log's path is refused before anything starts
        if starting:
            print(f"starting {what} on 127.0.0.1:{port} (log {log}; {starting})", flush=True)
        proc = start(log)
        pid = proc.pid
        try:
            write_pid(pid_file, pid)
        except (OSError, ValueError, EngineStartError):
            if hasattr(proc, "poll"):
                stop_process(proc)  # a server without a pid file could never be stopped by `stop`
            raise
        print(f"{what} up: http://127.0.0.1:{port}/v1 (pid {pid}{'' if starting else f', log {log}'}; stop: {stop})")
    print("run against it:\n  " + run_line())
    return pid


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's pick), for a server started next: tests, benches, sweeps."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
