"""`make reproduce-* BACKEND=...` (scgmem/harness/served_sweep.py) without a real engine: bad input is
one line and exit 2 before any model loads or server starts; a server is stopped after its runs,
also when they fail; a model whose runs finished starts no server on a relaunch."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scgmem.harness import served_sweep
from scgmem.harness.served_plan import ModelPlan
from scgmem.llm.served.launchers import Launcher, ServeSpec, Server

ROOT = Path(__file__).resolve().parents[2]
SLICE = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1"]
PORT = 18190  # this test file's ports: 18190-18199


@pytest.fixture(scope="module", autouse=True)
def standins():
    """The stand-ins' folders (`make standins`): the plan checks that a model folder is there before it
    checks a port or a GPU, so the bad-input cases below need them built (seconds, once)."""
    from scgmem.llm.doubles.tiny_real_models import build_standins

    return build_standins()


def sweep(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "scgmem.harness.served_sweep", "--experiment", "table1",
           "--sweep-dir", str(tmp_path / "sweep"), *args, "--", *SLICE]
    # any executable stands in for vLLM's interpreter: nothing here may start it
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "SCGMEM_VLLM_PYTHON": sys.executable, **(env or {})})


def one_line_exit_2(proc: subprocess.CompletedProcess, needle: str, tmp_path: Path) -> None:
    errors = [line for line in proc.stderr.strip().splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in errors[0], errors[0]
    assert not (tmp_path / "sweep").exists()  # nothing started, nothing written


def test_base_urls_must_name_one_server_per_model(tmp_path):
    proc = sweep(tmp_path, "--backend", "vllm", "--models", "standin-qwen2.5,standin-llama3.2",
                 "--base-urls", "http://127.0.0.1:18199/v1")
    one_line_exit_2(proc, "BASE_URLS has 1 entries for 2 models", tmp_path)


def test_a_gpu_that_is_not_there(tmp_path):
    proc = sweep(tmp_path, "--backend", "vllm", "--models", "standin-qwen2.5", "--gpus", "0,97")
    one_line_exit_2(proc, "97 (", tmp_path)  # 0 may be there; 97 is not


def test_a_model_config_without_weights(tmp_path):
    proc = sweep(tmp_path, "--backend", "vllm", "--models", "local")
    one_line_exit_2(proc, "no hub id or folder", tmp_path)


def test_a_backend_that_cannot_serve_scgmem(tmp_path):
    proc = sweep(tmp_path, "--backend", "url", "--models", "standin-qwen2.5", "--base-urls", "http://127.0.0.1:18199/v1")
    one_line_exit_2(proc, "method=scgmem on a server needs backend.llm.engine", tmp_path)


def test_a_port_in_use(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", PORT))
        busy.listen()
        proc = sweep(tmp_path, "--backend", "vllm", "--models", "standin-qwen2.5,standin-llama3.2",
                     "--port", str(PORT))
    one_line_exit_2(proc, f"port {PORT} (for standin-qwen2.5) is in use", tmp_path)


def test_a_backend_the_harness_cannot_start(tmp_path):
    proc = sweep(tmp_path, "--backend", "url", "--models", "standin-qwen2.5", "--port", str(PORT))
    assert proc.returncode == 2 and "starts servers for" in proc.stderr, proc.stderr


class SleepLauncher(Launcher):
    """A 'server' that is a sleeping process in its own session: enough to see it stopped."""

    name = "sleep"

    def start(self, spec, *, port, log=None, gpu=None, wait_s=0.0, on_spawn=None) -> Server:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        self.started.append((proc, gpu))
        return Server(proc=proc, url=f"http://127.0.0.1:{port}/v1", log=log, overrides=["seed=0"])


def fake_sweep(tmp_path, monkeypatch, run_code: int, models=("a", "b"), gpus=()):
    fake = SleepLauncher()
    fake.started = []
    monkeypatch.setattr(served_sweep, "launcher", lambda backend: fake)
    args, _ = served_sweep.parse_args(["--experiment", "table1", "--backend", "vllm", "--models", ",".join(models),
                                       "--gpus", ",".join(gpus), "--sweep-dir", str(tmp_path / "sweep")])
    plans = [ModelPlan(model=m, backend="vllm", spec=ServeSpec(model="/x", served_name=m), jobs=6, port=PORT + i)
             for i, m in enumerate(models)]
    sweep_ = served_sweep.Sweep(args, plans, [])
    monkeypatch.setattr(sweep_, "run_command", lambda plan, overrides: [sys.executable, "-c", f"exit({run_code})"])
    return sweep_, fake


@pytest.mark.parametrize("code", [0, 3])
def test_every_server_is_stopped_after_its_runs_whether_they_pass_or_fail(tmp_path, monkeypatch, code):
    sweep_, fake = fake_sweep(tmp_path, monkeypatch, code)
    assert sweep_.run() == (0 if code == 0 else 1)
    assert len(fake.started) == 2 and all(proc.poll() is not None for proc, _ in fake.started)
    assert [p.finished(sweep_.args.sweep_dir) for p in sweep_.plans] == [code == 0] * 2


def test_a_relaunch_skips_finished_models_and_gpus_are_handed_out_one_per_server(tmp_path, monkeypatch):
    sweep_, fake = fake_sweep(tmp_path, monkeypatch, 0, models=("a", "b", "c"), gpus=("0", "1"))
    assert sweep_.run() == 0
    assert sorted(gpu for _, gpu in fake.started) == ["0", "0", "1"] or sorted(gpu for _, gpu in fake.started) == \
        ["0", "1", "1"]
    again, fake2 = fake_sweep(tmp_path, monkeypatch, 0, models=("a", "b", "c"), gpus=("0", "1"))
    assert again.run() == 0 and fake2.started == []


def test_sigterm_stops_the_servers_and_the_runs(tmp_path):
    """The real entry point with a fake engine: SIGTERM mid-run leaves no process behind."""
    script = tmp_path / "drive.py"
    script.write_text(f"""
import sys, subprocess
from tests.harness.test_served_sweep import SleepLauncher
from scgmem.harness import served_sweep
from scgmem.harness.served_plan import ModelPlan
from scgmem.llm.served.launchers import ServeSpec
fake = SleepLauncher(); fake.started = []
served_sweep.launcher = lambda backend: fake
served_sweep.check = lambda args, extra: [ModelPlan(model="a", backend="vllm", spec=ServeSpec(model="/x", served_name="a"),
                                                    jobs=6, port={PORT})]
served_sweep.Sweep.run_command = lambda self, plan, o: [sys.executable, "-c", "import time; time.sleep(600)"]
import atexit
atexit.register(lambda: open({str(tmp_path / 'pids')!r}, "w").write(" ".join(str(p.pid) for p, _ in fake.started)))
sys.exit(served_sweep.main(["--experiment", "table1", "--backend", "vllm", "--sweep-dir", {str(tmp_path / 'sweep')!r}]))
""")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # `tests` importable from the script
    for line in proc.stdout:  # the run is started right after this line
        if line.startswith("a@vllm: import time"):
            break
    time.sleep(2)
    proc.terminate()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, err
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
