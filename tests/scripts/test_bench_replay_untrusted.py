"""`python -m scripts.bench_replay` treats requests.jsonl as untrusted (issue 58, item 3): it sends only
to --url, takes no URL from the file, checks every field (one line, exit 2, nothing sent), bounds every
wait, and leaves a resumed run's pause out of the run's span. Each test runs the real command."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.servers import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]


def reply(body):
    return 200, {"choices": [{"index": 0, "text": "a b", "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 2}}


def record(i, **over):
    rec = {"v": 2, "id": f"c0#{i}", "parents": [f"c0#{i - 1}"] if i else [], "session": 0,
           "server": "http://127.0.0.1:1/v1", "path": "/v1/completions", "start": float(i), "end": i + 1.0,
           "prompt_tokens": 10, "completion_tokens": 2, "body": {"model": "m", "prompt": "p", "max_tokens": 2}}
    return {**rec, **over}


def write(run_dir: Path, records, raw: str = "") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + raw)
    return run_dir


def bench_replay(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "scripts.bench_replay", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_a_forged_path_cannot_send_the_prompts_to_another_host(tmp_path):
    with ScriptedServer(reply) as named, ScriptedServer(reply) as other:
        host = other.url.removeprefix("http://").removesuffix("/v1")
        run = write(tmp_path / "run", [record(0, path=f"@{host}/v1/completions")])
        proc = bench_replay(run, "--url", named.url, "--out", tmp_path / "out.json")
        assert other.bodies == [] and named.bodies == []
    assert proc.returncode == 2 and "field path" in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out.json").exists()


def test_no_url_is_taken_from_the_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # the old replay opened file:// URLs from the file, and a FIFO there blocked forever
    run = write(tmp_path / "run", [record(0, server=f"file://{fifo}")])
    proc = bench_replay(run, timeout=30)
    assert proc.returncode == 2 and "--url" in proc.stderr
    with ScriptedServer(reply) as named:  # with --url, the file's server field is never used
        proc = bench_replay(run, "--url", named.url, "--no-salt", "--out", tmp_path / "out.json")
        sent = len(named.bodies)
    assert proc.returncode == 0, proc.stderr
    assert sent == 2  # the free replay and the causal one


@pytest.mark.parametrize("field, value, named", [
    ("end", 0.5, "field end"),  # a clock step: end before start (the old ordered replay deadlocked on it)
    ("prompt_tokens", 10 ** 400, "field prompt_tokens"),
    ("completion_tokens", True, "field completion_tokens"),
    ("start", True, "field start"),
    ("start", float("nan"), "field start"),
    ("end", float("inf"), "field end"),
    ("parents", ["c0#7"], "field parents"),
    ("path", "//evil.example/v1/completions", "field path"),
    ("v", True, "field v"),
])
def test_every_field_is_checked_before_anything_is_sent(tmp_path, field, value, named):
    with ScriptedServer(reply) as server:
        run = write(tmp_path / "run", [record(0), record(1, **{field: value})])
        proc = bench_replay(run, "--url", server.url, "--out", tmp_path / "out.json", timeout=30)
        sent = len(server.bodies)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and named in last and "requests.jsonl:2" in last, proc.stderr
    assert sent == 0 and "Traceback" not in proc.stderr


def test_a_symlinked_or_special_requests_file_is_refused(tmp_path):
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_text(json.dumps(record(0)) + "\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "requests.jsonl").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo-run-requests")
    (tmp_path / "run2").mkdir()
    os.rename(tmp_path / "fifo-run-requests", tmp_path / "run2" / "requests.jsonl")
    with ScriptedServer(reply) as server:
        for run in ("run", "run2"):
            proc = bench_replay(tmp_path / run, "--url", server.url, timeout=30)
            assert proc.returncode == 2 and "requests.jsonl" in proc.stderr.strip().splitlines()[-1], proc.stderr
        assert server.bodies == []


def test_a_resumed_runs_pause_is_not_idle_engine_time(tmp_path):
    # session 0: 2 s of requests; the run crashed and resumed 1,000 s later; session 1: 2 s more. The gap
    # is cut because a new session starts there, even when it is shorter than --pause-s
    records = [record(0), record(1, start=1.0, end=2.0),
               record(0, id="1/c0#0", parents=[], session=1, start=1002.0, end=1003.0),
               record(1, id="1/c0#1", parents=["1/c0#0"], session=1, start=1003.0, end=1004.0)]
    with ScriptedServer(reply) as server:
        run = write(tmp_path / "run", records)
        proc = bench_replay(run, "--url", server.url, "--no-causal", "--pause-s", 5000,
                            "--out", tmp_path / "out.json")
    assert proc.returncode == 0, proc.stderr
    profile = json.loads((tmp_path / "out.json").read_text())["runs"][0]["run"]
    assert profile["span_s"] == 4.0 and profile["paused_s"] == 1000.0 and profile["tokens_per_s"] == 12.0


def test_a_pause_without_sessions_is_cut_past_pause_s(tmp_path):
    records = [{**record(i), "v": 1} for i in range(2)] + [{**record(0), "v": 1, "start": 500.0, "end": 501.0}]
    for rec in records:
        for key in ("id", "parents", "session"):
            rec.pop(key)
    with ScriptedServer(reply) as server:
        run = write(tmp_path / "run", records)
        proc = bench_replay(run, "--url", server.url, "--out", tmp_path / "out.json")
    assert proc.returncode == 0, proc.stderr
    profile = json.loads((tmp_path / "out.json").read_text())["runs"][0]["run"]
    assert profile["paused_s"] == 498.0 and profile["span_s"] == 3.0
