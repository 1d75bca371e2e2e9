"""`scgmem-report` on shards and edited runs (issue 58), each through the real command:

* a merge of some question shards is marked partial, in its summary and in the tables built from it;
* shards that differ only in how they reached their servers (address, max_in_flight) merge;
* a per-question setting that contradicts the shard's own call log is refused;
* edited cost fields of summary.json are refused before the cost table;
* a table built from references not checked against the data file says so.

The shards are served runs against a scripted server on 127.0.0.1 (no model is loaded): conv-26,
one question per category, chunks of one question, in three question shards."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.test_run_e2e import ROOT, records, scgmem_run
from tests.llm.servers import ScriptedServer, completion

SLICE = ["method=full_context", "data.samples=[conv-26]", "data.questions_per_category=1", "run.answer_batch_size=1",
         "run.progress=false", "run.use_memory_cache=false", "model.retries=0"]


def reply(body):
    return 200, completion('{"answer": "7 May 2023"}')


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """s0 (0/3, server A, 4 in flight), s1 (1/3, server B, 8 in flight), s2 (2/3, server A, 4)."""
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir

    root, folder = tmp_path_factory.mktemp("shards"), resolve_model_dir(None, **EMBEDDED)
    with ScriptedServer(reply) as a, ScriptedServer(reply) as b:
        for name, server, limit in (("s0", a, 4), ("s1", b, 8), ("s2", a, 4)):
            scgmem_run("model=openai_compatible", f"model.base_url={server.url}", f"model.model_id={server.model}",
                       f"model.tokenizer={folder}", f"model.max_in_flight={limit}", *SLICE,
                       f"run.question_shard={name[1]}/3", f"hydra.run.dir={root / name}")
    return root


def report(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scgmem.report.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def one_line_refusal(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_merge_of_some_question_shards_is_marked_partial_in_the_run_and_its_tables(shards, tmp_path):
    out = tmp_path / "merged"
    proc = report("merge", "--out", out, shards / "s0", shards / "s2")
    assert proc.returncode == 0, proc.stderr
    merged = summary(out)
    assert merged["partial"]["missing_question_shards"] == {"conv-26": ["1/3"]}
    assert merged["config"]["run"]["question_shard"] == ["0/3", "2/3"]  # not null: not the whole slice
    assert report("costs", "--runs", out, "--out", tmp_path / "report").returncode == 0
    assert report("table1", "--runs", out, "--out", tmp_path / "report", "--n-resamples", 50).returncode == 0
    for table in ("costs.md", "table1.md"):
        text = (tmp_path / "report" / "tables" / table).read_text()
        assert "partial" in text and "1/3 of conv-26" in text, table
    whole = tmp_path / "whole"  # the missing shard merged in: the whole slice, marked so
    assert report("merge", "--out", whole, out, shards / "s1").returncode == 0
    assert summary(whole)["partial"] is None and summary(whole)["config"]["run"]["question_shard"] is None
    assert len(records(whole)) == len(records(shards / "s0")) + len(records(shards / "s1")) + len(records(shards / "s2"))


def test_shards_on_other_servers_with_other_limits_merge(shards, tmp_path):
    proc = report("merge", "--out", tmp_path / "merged", shards / "s0", shards / "s1", shards / "s2")
    assert proc.returncode == 0, proc.stderr
    pool = summary(tmp_path / "merged")["generation"]["server"]["pool"]
    assert len(pool["servers"]) == 2  # both shards' servers


def copy_run(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    s = summary(dst)
    edit(s)
    (dst / "summary.json").write_text(json.dumps(s))
    return dst


@pytest.mark.parametrize("where", ["config", "call log"])
def test_a_temperature_that_contradicts_the_call_log_is_refused(shards, tmp_path, where):
    def edit(s):
        if where == "config":  # both shards' settings edited alike: they agree with each other, not with their calls
            s["config"]["protocol"]["cat5_temperature"] = 0.9
        else:
            calls = s["generation"]["calls"]
            kind = next(k for k in calls if k.startswith("answer/"))
            calls[kind]["temperature"] = [0.9 if t == 0.5 else t for t in calls[kind]["temperature"]] or [0.9]

    a = copy_run(shards / "s0", tmp_path / "a", edit)
    b = copy_run(shards / "s2", tmp_path / "b", edit if where == "config" else lambda s: None)
    line = one_line_refusal(report("merge", "--out", tmp_path / "merged", a, b))
    assert "temperature" in line and "call log" in line


@pytest.mark.parametrize("field, value", [
    ("timing.answer_s_per_question", 1e-6), ("tokens_questions", 10**6), ("deviations.fallback", -3),
    ("data.ingested_turns.conv-99", 5), ("data.ingested_turns.conv-26", 1)])
def test_edited_cost_fields_never_reach_the_cost_table(shards, tmp_path, field, value):
    def edit(s):
        *parents, leaf = field.split(".", 2) if field.startswith("data.") else field.split(".")
        node = s
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        if field == "data.ingested_turns.conv-26":  # the total edited alike: only the data file can tell
            s["data"]["ingested_turns_total"] = value

    run = copy_run(shards / "s0", tmp_path / "runs" / "a", edit)
    line = one_line_refusal(report("costs", "--runs", tmp_path / "runs", "--out", tmp_path / "out"))
    assert str(run / "summary.json") in line and field.split(".")[-1] in line
    assert not (tmp_path / "out" / "tables" / "costs.md").exists()


def test_a_table_of_references_not_checked_against_data_says_so(shards, tmp_path):
    def no_data(s):
        s["config"]["data"]["path"] = str(tmp_path / "absent.json")

    run = copy_run(shards / "s0", tmp_path / "runs" / "a", no_data)
    assert report("costs", "--runs", run, "--out", tmp_path / "out").returncode == 0
    assert report("table1", "--runs", run, "--out", tmp_path / "out", "--n-resamples", 50).returncode == 0
    for table in ("costs.md", "table1.md"):
        assert "not checked against the data file" in (tmp_path / "out" / "tables" / table).read_text(), table
