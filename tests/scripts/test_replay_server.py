"""scripts/replay_server.py and scripts/bench_drive_rate.py (issue 57, item 3): a recorded run, run again
through `scgmem-run` against its own recorded replies, gets every request answered from the recording
(none missed) at any run.parallel_conversations; a body never recorded is a 404 naming the miss."""
from __future__ import annotations

import json

from scripts.bench_drive_rate import drive
from scripts.replay_server import Replies, key
from tests.harness.test_run_e2e import scgmem_run
from tests.llm.servers import ScriptedServer, completion, free_port


def test_a_recorded_run_replays_with_no_miss(tmp_path):
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir

    run_dir = tmp_path / "run"
    with ScriptedServer(lambda b: (200, completion('{"answer": "7 May 2023"}'))) as server:
        scgmem_run("model=openai_compatible", f"model.base_url={server.url}", f"model.model_id={server.model}",
                   f"model.tokenizer={resolve_model_dir(None, **EMBEDDED)}", "method=memorybank",
                   "data.samples=[conv-26,conv-30]", "data.max_sessions=1", "data.questions_per_category=1",
                   "run.progress=false", "model.record_requests=true", f"hydra.run.dir={run_dir}",
                   f"run.cache_dir={tmp_path / 'cache'}")  # an empty cache: the ingest is sent and recorded
        sent = len(server.bodies)
    for parallel in (1, 2):
        result = drive(run_dir, parallel, free_port())
        assert "failed" not in result, result
        assert result["missed"] == 0 and result["answered"] == sent and result["requests_per_s"] > 0


def test_bodies_match_without_their_cache_salt_and_misses_are_counted():
    rec = {"body": {"model": "m", "prompt": "p"}, "reply": {"choices": []}, "prompt_tokens": 1, "completion_tokens": 1}
    replies = Replies([rec, {**rec, "reply": {"choices": [1]}}])
    assert key({"prompt": "p", "model": "m", "cache_salt": "x"}) == key(rec["body"])
    assert replies.answer({"model": "m", "prompt": "p"}) == {"choices": []}  # recorded order
    assert replies.answer({"model": "m", "prompt": "p", "cache_salt": "s"}) == {"choices": [1]}
    assert replies.answer({"model": "m", "prompt": "other"}) is None
    assert replies.stats == {"answered": 2, "missed": 1, "reused": 0} and json.dumps(replies.models) == '["m"]'


def test_a_run_whose_memory_came_from_the_cache_is_refused_by_name(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"timing": {"memory_cache_hits": 2}}))
    result = drive(run_dir, 1, free_port())
    assert "summary.json: timing.memory_cache_hits is 2" in result["failed"]
