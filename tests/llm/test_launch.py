"""`launch.bring_up`, the background start behind `make vllm` and `make llamacpp`, with a fake start
function (no engine is started: a sleeping process with the server's command line): the already-up
path, the start path, and the exact lines the two launchers print through it."""
from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from scgmem.llm.served.launchers import launch, llamacpp as llamacpp_server, vllm as vllm_server
from tests.llm.servers import ScriptedServer, free_port

DEAD_PID = 2 ** 22 + 1  # above Linux's pid_max default: no process has it
MODULE = "fake.engine"
PROCS: list[subprocess.Popen] = []


def sleeper(module: str, port: int) -> subprocess.Popen:
    """A live process whose command line is `python ... -m <module> --port <port>`, as a server's."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", module, "--port", str(port)],
                            start_new_session=True)
    PROCS.append(proc)
    wait_for_cmdline(proc)
    return proc


def wait_for_cmdline(proc: subprocess.Popen) -> None:
    """Until the child has exec'd (its /proc command line is the one it was started with)."""
    import time
    from pathlib import Path

    for _ in range(100):
        if b"--port" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            return
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def _stop_sleepers():
    yield
    while PROCS:
        proc = PROCS.pop()
        proc.kill()
        proc.wait()


def args(port: int, model_id: str = "m") -> dict:
    return {"ours": launch.server_argv(MODULE, port), "model_id": model_id}


class FakeStart:
    """A start function that records the log it was given and starts a sleeping 'server' on `port`."""

    def __init__(self, port: int) -> None:
        self.port, self.logs, self.pid = port, [], None

    def __call__(self, log, *args, **kwargs):
        self.logs.append(log)
        self.pid = sleeper(MODULE, self.port).pid
        return SimpleNamespace(pid=self.pid)


def test_bring_up_starts_writes_the_pid_and_prints_where_and_how_to_run(tmp_path, capsys):
    port = free_port()
    start = FakeStart(port)
    state = tmp_path / "state"  # created by bring_up
    pid = launch.bring_up("Engine", port, state, start, stop="make engine-stop", run_line=lambda: "scgmem-run x",
                          **args(port))
    log = state / f"server-{port}.log"
    assert pid == start.pid and start.logs == [log]
    assert launch.read_pid(state / f"server-{port}.pid", launch.server_argv(MODULE, port)) == pid
    assert capsys.readouterr().out.splitlines() == [
        f"Engine up: http://127.0.0.1:{port}/v1 (pid {pid}, log {log}; stop: make engine-stop)",
        "run against it:", "  scgmem-run x"]


def test_bring_up_with_a_starting_line_names_the_log_before_the_start(tmp_path, capsys):
    port = free_port()
    start = FakeStart(port)
    launch.bring_up("Engine", port, tmp_path, start, stop="s", run_line=lambda: "r", starting="a while", **args(port))
    log = tmp_path / f"server-{port}.log"
    assert capsys.readouterr().out.splitlines()[:2] == [
        f"starting Engine on 127.0.0.1:{port} (log {log}; a while)",
        f"Engine up: http://127.0.0.1:{port}/v1 (pid {start.pid}; stop: s)"]


def test_bring_up_leaves_a_live_healthy_server_alone(tmp_path, capsys):
    with ScriptedServer(lambda body: (200, {})) as server:  # answers GET /health with 200, lists its model
        port = server.httpd.server_address[1]
        start = FakeStart(port)
        ours = sleeper(MODULE, port)  # the server the pid file recorded
        launch.write_pid(tmp_path / f"server-{port}.pid", ours.pid)
        pid = launch.bring_up("Engine", port, tmp_path, start, stop="s", run_line=lambda: "r",
                              **args(port, server.model))
    assert pid == ours.pid and start.logs == []
    assert capsys.readouterr().out.splitlines() == [
        f"Engine already up on 127.0.0.1:{port} (pid file {tmp_path / f'server-{port}.pid'})",
        "run against it:", "  r"]


def test_bring_up_restarts_when_the_pid_file_names_a_dead_process(tmp_path):
    port = free_port()
    start = FakeStart(port)
    (tmp_path / f"server-{port}.pid").write_text(json.dumps({"pid": DEAD_PID, "start_time": "1", "cmdline": ["x"]}))
    assert launch.bring_up("Engine", port, tmp_path, start, stop="s", run_line=lambda: "r", **args(port)) == start.pid
    assert len(start.logs) == 1 and json.loads((tmp_path / f"server-{port}.pid").read_text())["pid"] == start.pid



def test_a_failed_start_writes_no_pid_file(tmp_path):
    def failing(log):
        raise launch.EngineStartError(f"engine exited (log: {log})")

    port = free_port()
    with pytest.raises(launch.EngineStartError, match="engine exited"):
        launch.bring_up("Engine", port, tmp_path, failing, stop="s", run_line=lambda: "r", **args(port))
    assert not list(tmp_path.glob("*.pid"))


def test_the_vllm_and_llamacpp_launchers_print_their_lines(tmp_path, monkeypatch, capsys):
    """The lines `make vllm` and `make llamacpp` print (the ones they printed before bring_up)."""
    port, calls = free_port(), []

    pids = []

    def fake(name):
        def start(*args, **kwargs):
            calls.append((name, args, kwargs))
            pids.append(sleeper(vllm_server.MODULE if name == "vllm" else llamacpp_server.MODULE, port).pid)
            return SimpleNamespace(pid=pids[-1])
        return start

    monkeypatch.setattr(vllm_server, "STATE", tmp_path / "vllm")
    monkeypatch.setattr(vllm_server, "start", fake("vllm"))
    monkeypatch.setattr(llamacpp_server, "STATE", tmp_path / "llamacpp")
    monkeypatch.setattr(llamacpp_server, "start", fake("llamacpp"))
    monkeypatch.setattr(llamacpp_server, "run_line", lambda p: f"llamacpp run line {p}")
    args = Namespace(port=port, model=None, dtype="float32", max_model_len=8192, wait_s=5.0, extra="--x 1")
    assert vllm_server.up(args) == 0
    llamacpp_server.up(port, slots=2, threads=1, n_ctx=4096)
    vlog, llog = tmp_path / "vllm" / f"server-{port}.log", tmp_path / "llamacpp" / f"server-{port}.log"
    assert capsys.readouterr().out.splitlines() == [
        f"starting vLLM on 127.0.0.1:{port} (log {vlog}; about 1-3 minutes on a CPU)",
        f"vLLM up: http://127.0.0.1:{port}/v1 (pid {pids[0]}; stop: make vllm-stop)",
        "run against it:", "  " + vllm_server.run_line(port, vllm_server.SERVED_NAME),
        f"llama.cpp up: http://127.0.0.1:{port}/v1 (pid {pids[1]}, log {llog}; stop: make llamacpp-stop)",
        "run against it:", f"  llamacpp run line {port}"]
    assert calls == [
        ("vllm", (port,), {"model": None, "served_name": vllm_server.SERVED_NAME, "dtype": "float32",
                           "max_model_len": 8192, "wait_s": 5.0, "log": vlog, "extra": ["--x", "1"]}),
        ("llamacpp", (port,), {"slots": 2, "threads": 1, "n_ctx": 4096, "wait_s": 120, "log": llog})]
    assert json.loads((tmp_path / "vllm" / f"server-{port}.pid").read_text())["pid"] == pids[0]


@pytest.mark.parametrize("window, budget", [(8192, 32768), (65536, 65536)])
def test_vllm_command_never_splits_a_prompt(window, budget):
    # a seeded request whose prompt is split across steps kills a CPU engine (vllm_server's docstring):
    # no chunked prefill, and a step budget that holds the longest prompt the window allows
    cmd = vllm_server.command("m", 8000, python=Path("py"), served_name=None, max_model_len=window)
    assert "--no-enable-chunked-prefill" in cmd and "--enable-chunked-prefill" not in cmd
    assert cmd.count("--max-num-batched-tokens") == 1
    assert int(cmd[cmd.index("--max-num-batched-tokens") + 1]) == budget
