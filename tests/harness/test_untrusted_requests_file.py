"""requests.jsonl (model.record_requests=true) is a run file like the others (issue 58, item 3): a link
standing in its place is refused in one line before anything is sent, the recorder opens it without
following a link or opening a FIFO, and a resume cuts a torn last line before appending. Through
`scgmem-run` against a scripted server."""
from __future__ import annotations

import json
import os

import pytest

from tests.harness.test_run_e2e import records, scgmem_run
from tests.llm.servers import ScriptedServer, completion

SMALL = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false",
         "method=full_context", "run.answer_batch_size=1", "model.retries=0", "model.record_requests=true"]


@pytest.fixture(scope="module")
def tokenizer():
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir

    return resolve_model_dir(None, **EMBEDDED)


def served(server, tokenizer):
    return ["model=openai_compatible", f"model.base_url={server.url}", f"model.model_id={server.model}",
            f"model.tokenizer={tokenizer}"]


def test_a_link_named_requests_jsonl_is_refused_before_any_request(tmp_path, tokenizer):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("")
    (run_dir / "requests.jsonl").symlink_to("notes.txt")  # inside the run directory, but where the harness writes
    with ScriptedServer(lambda b: (200, completion('{"answer": "yes"}'))) as server:
        proc = scgmem_run(*served(server, tokenizer), *SMALL, f"hydra.run.dir={run_dir}", check=False)
        sent = [b for b in server.bodies if "messages" in b or "prompt" in b]
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "requests.jsonl" in last and "Traceback" not in proc.stderr
    assert sent == [] and (run_dir / "notes.txt").read_text() == ""


def test_the_recorder_refuses_a_fifo_planted_after_the_scan(tmp_path):
    from scgmem.harness.safe_files import SpecialFile, open_fd
    from scgmem.llm.served.recorder import RequestRecorder

    os.mkfifo(tmp_path / "requests.jsonl")
    with pytest.raises(SpecialFile):  # opened non-blocking and refused: no hang
        RequestRecorder(tmp_path / "requests.jsonl", open_fd)


def test_a_resume_cuts_the_torn_last_line_and_the_file_stays_readable(tmp_path, tokenizer):
    answered = []

    def dies_after_one(body):
        answered.append(1)
        return (200, completion('{"answer": "yes"}')) if len(answered) <= 1 else (500, {"error": "gone"})

    run_dir = tmp_path / "run"
    with ScriptedServer(dies_after_one) as server:
        proc = scgmem_run(*served(server, tokenizer), *SMALL, f"hydra.run.dir={run_dir}", check=False)
    assert proc.returncode == 2 and len(records(run_dir)) == 1
    path = run_dir / "requests.jsonl"
    whole = path.read_text()
    with open(path, "a") as f:
        f.write('{"v": 2, "id": "c0#9", "path": "/v1/chat/compl')  # killed in the middle of a line
    with ScriptedServer(lambda b: (200, completion('{"answer": "yes"}'))) as server:
        scgmem_run(*served(server, tokenizer), *SMALL, f"hydra.run.dir={run_dir}")
    assert len(records(run_dir)) == 2
    text = path.read_text()
    assert text.startswith(whole) and "c0#9" not in text
    from scgmem.llm.served.request_profile import read_records

    recs = read_records(path)
    assert [r["session"] for r in recs] == [0, 1] and recs[1]["id"].startswith("1/")
    assert json.loads(text.splitlines()[-1])["reply"]["choices"][0]["message"]["content"] == '{"answer": "yes"}'
