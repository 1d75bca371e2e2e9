"""Starting and stopping a local serving engine: one bounded /health wait and one pid file, for
every engine the project can start (llama.cpp's `llamacpp_server`, vLLM's `vllm_server`) and for the
tests that start them.

Imports nothing heavy: the launchers run before any model is loaded, and `make vllm` must answer
in seconds when the server is already up.
"""
from __future__ import annotations

import os
import signal
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
    out = open(log, "ab") if log else subprocess.DEVNULL
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


def write_pid(pid_file: Path, pid: int) -> None:
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{pid}\n")


def read_pid(pid_file: Path) -> int | None:
    """The pid in `pid_file` if that process is alive; None when there is no file or no process.
    A file that does not hold one integer is a one-line error naming it."""
    if not pid_file.exists():
        return None
    text = pid_file.read_text().strip()
    if not text.isdigit():
        raise ValueError(f"{pid_file}: expected one process id, got {text[:40]!r}")
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return pid


def stop_pid_file(pid_file: Path, grace_s: float = 20.0) -> bool:
    """Stop the process group named by `pid_file` and remove the file; False when nothing ran."""
    pid = read_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.25)
    else:
        _signal_group(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def bring_up(what: str, port: int, state: Path, start: Callable[[Path], subprocess.Popen], *, stop: str,
             run_line: Callable[[], str], starting: str | None = None) -> int:
    """`make vllm` / `make llamacpp`: start an engine in the background on 127.0.0.1:`port` unless
    the one its pid file names is alive and answers /health; print where it is and the scgmem-run
    line for it (`run_line`, called once the server is up). Returns the server's pid.

    `start(log)` starts the engine, logging to `log`, and returns once it is healthy (raising
    `EngineStartError` otherwise); its pid goes to `state`/server-`port`.pid. `stop`: the command
    that stops it. `starting`: a line printed before a start that takes long enough to want one
    (e.g. "about 1-3 minutes on a CPU"), naming the log; without it the log is named once the
    engine is up, so each start names its log exactly once.
    """
    pid_file, log = state / f"server-{port}.pid", state / f"server-{port}.log"
    pid = read_pid(pid_file)
    if pid is not None and healthy(f"http://127.0.0.1:{port}/health"):
        print(f"{what} already up on 127.0.0.1:{port} (pid file {pid_file})")
    else:
        state.mkdir(parents=True, exist_ok=True)
        if starting:
            print(f"starting {what} on 127.0.0.1:{port} (log {log}; {starting})", flush=True)
        pid = start(log).pid
        write_pid(pid_file, pid)
        print(f"{what} up: http://127.0.0.1:{port}/v1 (pid {pid}{'' if starting else f', log {log}'}; stop: {stop})")
    print("run against it:\n  " + run_line())
    return pid


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's pick), for a server started next: tests, benches, sweeps."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
