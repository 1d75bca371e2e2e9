"""`make vllm-stop`, `make llamacpp-stop` and `make llamacpp` never signal or vouch for a process
that is not the server they started (issue 58): the pid file records the process's start time and
command line, pid 0/1 and strangers are refused in one line, a port held by another service is
refused, and a symlink planted at the pid file or the log is never followed.

Every test runs the make target in its own session (a pid file of 0 must not reach pytest's group)
on a port of 18300-18399, and stops every process it started."""
from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scgmem.llm.served.launchers import launch, llamacpp as llamacpp_server, vllm as vllm_server

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
LLAMACPP_MODULE = "scgmem.llm.served.launchers.llamacpp"
TARGETS = {"llamacpp": (llamacpp_server, "LLAMACPP_PORT"), "vllm": (vllm_server, "VLLM_PORT")}


def make(target: str, port: int, timeout: float = 60) -> subprocess.CompletedProcess:
    var = TARGETS[target.removesuffix("-stop")][1]
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), target, f"{var}={port}", f"VENV={VENV}"],
                          capture_output=True, text=True, timeout=timeout, start_new_session=True)


def error_line(proc) -> str:
    """The one line a refusal prints (make adds its own `make: *** ... Error 2` after it)."""
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def sleeper(*argv: str) -> subprocess.Popen:
    """A live process leading its own session, with `argv` on its command line."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *argv], start_new_session=True)


@contextlib.contextmanager
def another_service(port: int):
    """An HTTP service on 127.0.0.1:`port` that answers every GET (its /health too) with 200."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        httpd.shutdown()
        httpd.server_close()


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


@pytest.fixture
def state(request):
    """The target's pid file and log for a port of our range, removed (with any process) after."""
    target, port = request.param
    module = TARGETS[target][0]
    paths = [module.STATE / f"server-{port}.pid", module.STATE / f"server-{port}.log"]
    started: list[subprocess.Popen] = []
    yield target, port, module.STATE, started
    for proc in started:
        if alive(proc):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for path in paths:
        if path.is_symlink() or path.exists():
            path.unlink()


def _write_old_style(pid_file: Path, pid) -> None:
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{pid}\n")


BOTH = [("llamacpp", 18311), ("vllm", 18312)]


@pytest.mark.parametrize("state", BOTH, indirect=True)
def test_a_pid_file_of_a_bare_number_signals_nothing(state):
    """A pid file naming a stranger's process (a stale number, reused) leaves that process alive."""
    target, port, folder, started = state
    stranger = sleeper()
    started.append(stranger)
    _write_old_style(folder / f"server-{port}.pid", stranger.pid)
    proc = make(f"{target}-stop", port)
    time.sleep(0.5)
    assert alive(stranger), "the stop signalled a process it never started"
    assert proc.returncode == 2 and "nothing signalled" in error_line(proc)


@pytest.mark.parametrize("state", BOTH, indirect=True)
@pytest.mark.parametrize("pid", ["bare 0", "0", "1", "-5", "1.5", "true"])
def test_pid_0_1_negative_and_non_integers_are_refused_in_one_line(state, pid):
    """"bare 0": a file holding only `0`, which made the stop signal make's own process group."""
    target, port, folder, _ = state
    pid_file = folder / f"server-{port}.pid"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text("0\n" if pid == "bare 0" else
                        json.dumps({"pid": json.loads(pid), "start_time": "1", "cmdline": ["x"]}))
    proc = make(f"{target}-stop", port)
    assert proc.returncode == 2 and "nothing signalled" in error_line(proc)


@pytest.mark.parametrize("state", [("llamacpp", 18313)], indirect=True)
def test_a_forged_identity_of_another_process_is_refused(state):
    """A pid file in the new format naming another live process, whose start time it cannot know, or
    a process that is not the launcher's server on that port."""
    _, port, folder, started = state
    stranger = sleeper()
    started.append(stranger)
    pid_file = folder / f"server-{port}.pid"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(json.dumps({"pid": stranger.pid, "start_time": "1", "cmdline": stranger.args}))
    proc = make("llamacpp-stop", port)
    assert proc.returncode == 2 and "not the server this file recorded" in error_line(proc) and alive(stranger)
    launch.write_pid(pid_file, stranger.pid)  # its true identity, but not a llama.cpp server on this port
    proc = make("llamacpp-stop", port)
    assert proc.returncode == 2 and alive(stranger)


@pytest.mark.parametrize("state", [("llamacpp", 18314)], indirect=True)
def test_the_launchers_own_server_is_stopped(state):
    _, port, folder, started = state
    server = sleeper("-m", LLAMACPP_MODULE, "--port", str(port))
    started.append(server)
    time.sleep(0.2)
    launch.write_pid(folder / f"server-{port}.pid", server.pid)
    proc = make("llamacpp-stop", port)
    assert proc.returncode == 0 and f"llama.cpp on port {port} stopped" in proc.stdout, proc.stderr
    server.wait(10)
    assert not (folder / f"server-{port}.pid").exists()


@pytest.mark.parametrize("state", [("llamacpp", 18315)], indirect=True)
def test_a_port_held_by_another_service_is_not_already_up(state):
    """Another HTTP service answers /health on the port, and the pid file names a live process that
    is not the server: `make llamacpp` refuses instead of printing a run line for the stranger."""
    _, port, folder, started = state
    stranger = sleeper()
    started.append(stranger)
    _write_old_style(folder / f"server-{port}.pid", stranger.pid)
    with another_service(port):
        proc = make("llamacpp", port)
    assert proc.returncode == 2, proc.stdout
    assert "already up" not in proc.stdout and "run against it" not in proc.stdout
    (folder / f"server-{port}.pid").unlink()
    with another_service(port):  # no pid file at all: the port is someone else's
        proc = make("llamacpp", port, timeout=180)
    _stop_any_started(folder / f"server-{port}.pid", started)
    assert proc.returncode == 2 and "in use by something else" in error_line(proc)
    assert "run against it" not in proc.stdout


def _stop_any_started(pid_file: Path, started: list) -> None:
    """A server the code under test may have started anyway (old code): stop it by its own record."""
    if not pid_file.is_file():
        return
    text = pid_file.read_text().strip()
    if not (text.startswith("{") or text.isdigit()):
        return  # no pid was written (the planted link's target is intact)
    pid = json.loads(text)["pid"] if text.startswith("{") else int(text)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if LLAMACPP_MODULE.encode() in cmdline:
        os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize("state", [("llamacpp", 18316)], indirect=True)
@pytest.mark.parametrize("which", ["pid", "log"])
def test_a_symlinked_pid_file_or_log_is_never_followed(state, tmp_path, which):
    """A link planted at the pid file or the log: refused before anything starts, its target untouched."""
    _, port, folder, started = state
    target = tmp_path / "outside.txt"
    target.write_text("precious\n")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"server-{port}.{which}").symlink_to(target)
    proc = make("llamacpp", port, timeout=180)
    _stop_any_started(folder / f"server-{port}.pid", started)
    assert target.read_text() == "precious\n"
    assert proc.returncode == 2 and "symlink" in error_line(proc)
