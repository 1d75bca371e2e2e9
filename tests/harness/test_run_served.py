"""scgmem-run with model=openai_compatible: against a scripted local server (fast: the output
contract, the key kept out of the outputs, one-line refusals) and against a real
`transformers serve` on the embedded SmolLM2 (slow: contract, determinism, resume, memgpt/amem)."""
from __future__ import annotations

import json

import pytest

from tests.llm.servers import RealServer, ScriptedServer, completion, free_port
from tests.harness.test_run_e2e import REQUIRED_FIELDS, comparable, records, run_until_killed, scgmem_run

SMALL = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false"]


@pytest.fixture(scope="module")
def hf_folder():
    from scgmem.llm.loading import resolve_model_dir
    from scgmem.llm.loading import EMBEDDED

    return resolve_model_dir(None, **EMBEDDED)


def served(url, model, tokenizer):
    return ["model=openai_compatible", f"model.base_url={url}", f"model.model_id={model}", f"model.tokenizer={tokenizer}"]


def test_scripted_server_run_meets_the_contract_and_keeps_the_key_out(tmp_path, hf_folder, monkeypatch):
    with ScriptedServer(lambda b: (200, completion('{"answer": "7 May 2023"}'))) as server:
        run_dir = tmp_path / "run"
        scgmem_run(*served(server.url, server.model, hf_folder), "model.api_key_env=SCGMEM_TEST_KEY",
                   "method=full_context", *SMALL, f"hydra.run.dir={run_dir}", env={"SCGMEM_TEST_KEY": "sk-do-not-write"})
    recs = records(run_dir)
    assert len(recs) == 2 and all(set(REQUIRED_FIELDS) <= set(r) for r in recs)  # session 1's questions
    assert {r["prediction"] for r in recs} == {"7 May 2023"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["generation"]["server"]["models_reported"] == ["tiny-served"]
    assert summary["tokens"]["answer"]["calls"] == 2
    for name in ("run.json", "summary.json", "run.log", "predictions.jsonl"):
        assert "sk-do-not-write" not in (run_dir / name).read_text()
    assert all(b["_auth"] == "Bearer sk-do-not-write" for b in server.bodies)


def test_scgmem_refuses_naming_the_local_backend(tmp_path, hf_folder):
    with ScriptedServer(lambda b: (200, completion("x"))) as server:
        proc = scgmem_run(*served(server.url, server.model, hf_folder), "method=scgmem", *SMALL,
                          f"hydra.run.dir={tmp_path / 'run'}", check=False)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()[-1:]
    assert "model.engine=" in line and "local backend" in line


def test_unreachable_server_exits_2_with_one_line(tmp_path, hf_folder):
    url = f"http://127.0.0.1:{free_port()}/v1"
    proc = scgmem_run(*served(url, "m", hf_folder), "model.retries=0", "method=full_context", *SMALL,
                      f"hydra.run.dir={tmp_path / 'run'}", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: model=openai_compatible: {url}/models: unreachable")


def test_server_failing_mid_run_keeps_predictions_and_a_rerun_resumes(tmp_path, hf_folder):
    answered = []

    def dies_after_one(body):
        answered.append(1)
        return (200, completion('{"answer": "yes"}')) if len(answered) <= 1 else (500, {"error": "gone"})

    run_dir = tmp_path / "run"
    args = ["method=full_context", *SMALL, "run.answer_batch_size=1", "model.retries=0", f"hydra.run.dir={run_dir}"]
    with ScriptedServer(dies_after_one) as server:
        proc = scgmem_run(*served(server.url, server.model, hf_folder), *args, check=False)
    assert proc.returncode == 2 and "HTTP 500" in proc.stderr.strip().splitlines()[-1]
    assert len(records(run_dir)) == 1
    with ScriptedServer(lambda b: (200, completion('{"answer": "yes"}'))) as server:  # another port: same run
        scgmem_run(*served(server.url, server.model, hf_folder), *args)
    assert len(records(run_dir)) == 2 and len(server.bodies) == 1


# ---------------------------------------------------------------------------- a real server
@pytest.fixture(scope="module")
def real_server(hf_folder, tmp_path_factory):
    pytest.importorskip("fastapi", reason="the `serving` extra (transformers serve) is not installed")
    with RealServer(hf_folder, tmp_path_factory.mktemp("serve") / "serve.log") as server:
        yield server


@pytest.mark.slow
def test_real_server_contract_determinism_and_resume(real_server, hf_folder, tmp_path):
    args = [*served(real_server.url, str(hf_folder), hf_folder), "method=full_context", "data.samples=[conv-26]",
            "data.max_sessions=1", "data.questions_per_category=2", "run.answer_batch_size=1", "run.progress=false"]
    first, second, killed = tmp_path / "a", tmp_path / "b", tmp_path / "killed"
    scgmem_run(*args, f"hydra.run.dir={first}")
    scgmem_run(*args, f"hydra.run.dir={second}")
    recs = records(first)
    assert len(recs) >= 2 and all(set(REQUIRED_FIELDS) <= set(r) for r in recs)
    assert comparable(recs) == comparable(records(second))  # a deterministic server: identical predictions
    partial = run_until_killed(args, killed, lines=1)
    assert 1 <= len(partial) < len(recs), "the run should have been killed part-way"
    scgmem_run(*args, f"hydra.run.dir={killed}")
    assert comparable(records(killed)) == comparable(recs)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["amem", "memgpt"])
def test_real_server_runs_the_agentic_baselines(real_server, hf_folder, tmp_path, method):
    run_dir = tmp_path / method
    scgmem_run(*served(real_server.url, str(hf_folder), hf_folder), f"method={method}", *SMALL,
               f"hydra.run.dir={run_dir}")
    assert len(records(run_dir)) == 2
    assert json.loads((run_dir / "summary.json").read_text())["tokens"]["ingest"]["calls"] > 0
