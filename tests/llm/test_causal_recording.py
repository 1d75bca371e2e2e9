"""Causal recording (scgmem/llm/causal.py, scgmem/llm/served/recorder.py): every recorded request names
the requests whose replies its job had seen, through the batching front's jobs and `llm.map` sub-jobs
and the served backend's own threads; the graph does not depend on the in-flight limit or on how many
conversations run at once, so the causal replay cannot copy the harness's scheduling."""
from __future__ import annotations

import json

import pytest

from scgmem.testing.scripted import fake_pipeline
from scgmem.llm.scheduler import BatchingFront
from scgmem.llm.served.request_profile import critical_path, read_records
from tests.harness.test_concurrency import _completion_reply, three_conversations  # noqa: F401 (fixture)
from tests.llm.servers import ScriptedServer


def served_llm(url, model, max_in_flight, path):
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir
    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM(url, model, tokenizer=resolve_model_dir(None, **EMBEDDED), api="completions",
                              max_in_flight=max_in_flight, retries=0, record_requests=True)
    llm.record_requests_to(path)
    return llm


def graph(path):
    """{id: (parents, prompt)}: the causal graph with what each request asked."""
    return {r["id"]: (tuple(r["parents"]), r["body"]["prompt"]) for r in read_records(path)}


def test_parents_are_the_last_reply_the_fork_and_the_join(tmp_path):
    def job(tag):
        def run():
            llm = front.current().llm
            llm.generate([f"{tag} first"], max_new_tokens=2)
            llm.map(lambda x: llm.generate([f"{tag} branch {x}"], max_new_tokens=2), [0, 1])
            llm.generate([f"{tag} after", f"{tag} after too"], max_new_tokens=2)  # two prompts: a fork of the backend
            llm.generate([f"{tag} last"], max_new_tokens=2)
        return run

    with ScriptedServer(_completion_reply(0)) as server:
        llm = served_llm(server.url, server.model, 4, tmp_path / "requests.jsonl")
        front = BatchingFront(llm)
        front.run([job("a"), job("b")], width=2)
    got = {prompt: (rid, parents) for rid, (parents, prompt) in graph(tmp_path / "requests.jsonl").items()}
    ids = {prompt: rid for prompt, (rid, _) in got.items()}
    for tag in "ab":
        assert got[f"{tag} first"][1] == ()  # a conversation's start
        assert got[f"{tag} branch 0"][1] == got[f"{tag} branch 1"][1] == (ids[f"{tag} first"],)  # the fork
        join = tuple(sorted((ids[f"{tag} branch 0"], ids[f"{tag} branch 1"])))
        assert got[f"{tag} after"][1] == got[f"{tag} after too"][1] == join  # the join
        assert got[f"{tag} last"][1] == tuple(sorted((ids[f"{tag} after"], ids[f"{tag} after too"])))
    assert not set(ids[p] for p in ids if p.startswith("a")) & set(x for p in got if p.startswith("b")
                                                                    for x in got[p][1])  # jobs apart


@pytest.mark.parametrize("method", ["memorybank", "readagent"])
def test_the_causal_graph_does_not_depend_on_max_in_flight_or_parallel_conversations(
        method, three_conversations, tmp_path):  # noqa: F811 (the fixture)
    graphs = {}
    for name, bound, parallel in (("b1", 1, 1), ("b16", 16, 3)):
        with ScriptedServer(_completion_reply(bound)) as server:  # replies in another order each time
            llm = served_llm(server.url, server.model, bound, tmp_path / name / "requests.jsonl")
            fake_pipeline(method, tmp_path / name, parallel=parallel, llm=llm, answer_batch_size=2).run(
                three_conversations)
            sent = len(server.bodies)
        graphs[name] = graph(tmp_path / name / "requests.jsonl")
        assert len(graphs[name]) == sent
    assert graphs["b1"] == graphs["b16"]
    records = read_records(tmp_path / "b1" / "requests.jsonl")
    roots = [r for r in records if not r["parents"]]
    # each conversation starts with no parents (its first call may fan out into several requests)
    assert {r["id"].split("#")[0].split(".")[0] for r in roots} == {"c0", "c1", "c2"}
    assert any(len(r["parents"]) > 1 for r in records)  # a join (the answers' map) is in the graph
    path = critical_path(records)
    assert 1 < path["requests"] < len(records)


def test_a_resume_starts_a_new_session_after_cutting_a_torn_line(tmp_path):
    from scgmem.llm import causal
    from scgmem.llm.served.recorder import RequestRecorder

    path = tmp_path / "requests.jsonl"
    with causal.using(causal.Strand("c0")):
        first = RequestRecorder(path)
        first.record(path="/v1/completions", body={"prompt": "x"}, reply={}, server="s", start=1.0, end=2.0)
        first.close()
    with open(path, "a") as f:
        f.write('{"v": 2, "id": "c0#1", "pare')  # killed mid-line
    with causal.using(causal.Strand("c0")):
        second = RequestRecorder(path)
        second.record(path="/v1/completions", body={"prompt": "y"}, reply={}, server="s", start=5.0, end=6.0)
        second.close()
    records = read_records(path)
    assert [(r["id"], r["parents"], r["session"]) for r in records] == [("c0#0", [], 0), ("1/c0#0", [], 1)]
    assert json.loads(path.read_text().splitlines()[1])["body"] == {"prompt": "y"}
