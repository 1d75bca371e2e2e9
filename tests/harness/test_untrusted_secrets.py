"""Issue 48: no secret in any file of a run. The API key (model.api_key_env) is sent as a Bearer
header and written nowhere; a password in model.base_url is refused before Hydra writes .hydra/.
Every file under the run directory is read and searched, whatever its name."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.test_run_e2e import scgmem_run
from tests.llm.servers import completion
from tests.llm.test_untrusted_served import Server

SMALL = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false",
         "method=full_context"]


@pytest.fixture(scope="module")
def hf_folder():
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir

    return resolve_model_dir(None, **EMBEDDED)


def _files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and secret.encode() in p.read_bytes()]


def test_the_key_is_sent_and_written_nowhere(tmp_path, hf_folder):
    secret = "sk-issue48-never-written"
    answer = {"/v1/chat/completions": lambda body: (200, completion('{"answer": "7 May 2023"}', model="m"), {})}
    with Server(models=["m"], routes=answer) as server:
        run_dir = tmp_path / "run"
        scgmem_run("model=openai_compatible", f"model.base_url={server.url}", "model.model_id=m",
                   f"model.tokenizer={hf_folder}", "model.api_key_env=SCGMEM_TEST_KEY", *SMALL,
                   f"hydra.run.dir={run_dir}", env={"SCGMEM_TEST_KEY": secret})
    assert (run_dir / "summary.json").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()
    assert _files_holding(run_dir, secret) == []
    assert any(body for method, path, body in server.seen if path == "/v1/chat/completions")


def test_a_password_in_base_url_is_refused_before_any_file_is_written(tmp_path, hf_folder):
    password = "hunter2-issue48"
    run_dir = tmp_path / "run"
    proc = scgmem_run("model=openai_compatible", f"model.base_url=http://user:{password}@127.0.0.1:18399/v1",
                      "model.model_id=m", f"model.tokenizer={hf_folder}", *SMALL, f"hydra.run.dir={run_dir}",
                      check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "credentials in the URL are refused" in err[0], proc.stderr[-2000:]
    assert password not in proc.stderr + proc.stdout
    assert not run_dir.exists() or _files_holding(run_dir, password) == []


def test_a_scheme_typo_is_refused_before_the_key_goes_anywhere(tmp_path, hf_folder):
    proc = scgmem_run("model=openai_compatible", "model.base_url=htps://127.0.0.1:18399/v1", "model.model_id=m",
                      f"model.tokenizer={hf_folder}", "model.api_key_env=SCGMEM_TEST_KEY", *SMALL,
                      f"hydra.run.dir={tmp_path / 'run'}", env={"SCGMEM_TEST_KEY": "sk-x"}, check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "the scheme must be http:// or https://" in err[0]
