"""scripts/bench_replay.py and scgmem/llm/served/request_profile.py: a run's profile from its recorded
requests (hand-worked intervals), a replay against a scripted server whose tokens add up to the
recorded ones; the causal replay waits on a request's recorded parents and on nothing else."""
from __future__ import annotations

import json
import threading
import time

from scgmem.llm.served.request_profile import critical_path, run_profile
from scripts.bench_replay import bench, replay
from tests.llm.servers import ScriptedServer


def record(start, end, prompt=10, completion=2, server="http://127.0.0.1:1/v1", rid=None, parents=(), session=0):
    rec = {"v": 1, "server": server, "path": "/v1/completions", "start": start, "end": end,
           "prompt_tokens": prompt, "completion_tokens": completion,
           "body": {"model": "tiny-served", "prompt": "p", "max_tokens": 2}}
    return rec if rid is None else {**rec, "v": 2, "id": rid, "parents": list(parents), "session": session}

def test_run_profile_on_hand_worked_intervals():
    # [0, 2] and [1, 3] overlap, [5, 6] after a gap: span 6 s, busy 4 s, 2 + 2 + 1 = 5 request-seconds
    profile = run_profile([record(0, 2), record(1, 3), record(5, 6, prompt=20, completion=None)])
    assert profile["span_s"] == 6 and profile["busy_share"] == round(4 / 6, 4)
    assert profile["mean_in_flight"] == round(5 / 6, 3)
    assert profile["tokens"] == 12 + 12 + 20 and profile["tokens_per_s"] == round(44 / 6, 2)


def test_run_profile_cuts_pauses_longer_than_pause_s():
    # a run resumed after a restart: the 14 s with nothing in flight (6 -> 20) is a pause and leaves the
    # span; the 2 s gap (3 -> 5) stays engine idle time. Span 21 - 14 = 7 s, busy 3 + 1 + 1 = 5 s,
    # 2 + 2 + 1 + 1 = 6 request-seconds
    records = [record(0, 2), record(1, 3), record(5, 6), record(20, 21)]
    profile = run_profile(records, pause_s=10)
    assert profile["paused_s"] == 14 and profile["span_s"] == 7
    assert profile["busy_share"] == round(5 / 7, 4) and profile["mean_in_flight"] == round(6 / 7, 3)
    assert "paused_s" not in run_profile(records) and run_profile(records)["span_s"] == 21
    assert run_profile(records, pause_s=1)["paused_s"] == 2 + 14


def test_run_profile_cuts_the_gap_before_a_resumed_session():
    # session 1 resumes 100 s after session 0's last reply: that gap is a pause even without pause_s
    records = [record(0, 2, rid="c0#0"), record(1, 3, rid="c0#1"), record(103, 104, rid="1/c0#0", session=1)]
    profile = run_profile(records)
    assert profile["paused_s"] == 100 and profile["span_s"] == 4


def reply(body):
    return 200, {"choices": [{"index": 0, "text": "a b", "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 2}}


def chain(n, server):
    """n requests, each the parent of the next, one at a time, back to back."""
    return [record(i, i + 1, server=server, rid=f"c0#{i}", parents=[f"c0#{i - 1}"] if i else [])
            for i in range(n)]


def test_replay_sends_every_request_and_divides_the_rates(tmp_path):
    with ScriptedServer(reply) as server:
        records = chain(6, server.url)
        (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        result = bench(tmp_path, server.url.removesuffix("/v1"), concurrency=4)
        salts = [b.get("cache_salt") for b in server.bodies]
        sent = len(server.bodies)
    assert len(set(salts[:6])) == 1 and salts[0] and salts[6:12] == [None] * 6  # salted, then warm
    assert len(set(salts[12:])) == 1 and salts[12] not in (None, salts[0])  # the causal replay: its own salt
    assert sent == 18 and result["replay"]["tokens"] == result["run"]["tokens"] == 72
    assert result["replay_causal"]["tokens"] == 72
    assert result["order_cap"] == round(result["replay_causal"]["tokens_per_s"] / result["replay"]["tokens_per_s"], 4)
    assert result["run_over_causal"] == round(12.0 / result["replay_causal"]["tokens_per_s"], 4)
    assert result["run"]["tokens_per_s"] == 12.0 and result["run"]["mean_in_flight"] == 1.0
    assert result["engine_utilization"] == round(12.0 / result["replay"]["tokens_per_s"], 4)
    assert result["critical_path"] == {"requests": 6, "tokens": 72, "request_seconds": 6.0, "roots": 1,
                                       "total_requests": 6}


def lettered(start, end, letter, server, parents=()):
    rec = record(start, end, server=server, rid=letter, parents=parents)
    return {**rec, "body": {**rec["body"], "prompt": letter}}


def test_critical_path_on_a_hand_worked_graph():
    # A -> B -> D and A -> C, C -> D (a fork and its join); E alone. Longest: A B D (or A C D), 3 requests;
    # in tokens A(12) + C(32) + D(12) = 56
    records = [lettered(0, 1, "A", ""), lettered(1, 2, "B", "", ["A"]),
               {**lettered(1, 4, "C", "", ["A"]), "prompt_tokens": 30}, lettered(4, 5, "D", "", ["B", "C"]),
               lettered(0, 9, "E", "")]
    assert critical_path(records) == {"requests": 3, "tokens": 56, "request_seconds": 9.0, "roots": 2,
                                      "total_requests": 5}


def test_causal_replay_waits_on_parents_only_not_on_what_ended_before():
    events, lock = [], threading.Lock()

    def slow(body):
        with lock:
            events.append(("sent", body["prompt"]))
        time.sleep(0.8 if body["prompt"] == "B" else 0.1)  # B outlasts A and C together
        with lock:
            events.append(("done", body["prompt"]))
        return reply(body)

    with ScriptedServer(slow) as server:
        # in the run, C started after A and B had ended, but its only parent is A; D joins B and C
        records = [lettered(0, 1, "A", server.url), lettered(0, 2, "B", server.url),
                   lettered(3, 4, "C", server.url, ["A"]), lettered(5, 6, "D", server.url, ["B", "C"])]
        result = replay(records, server.url.removesuffix("/v1"), concurrency=8, salt=None, causal=True)
    at = {e: n for n, e in enumerate(events)}
    assert at[("sent", "C")] > at[("done", "A")] and at[("sent", "C")] < at[("done", "B")]  # not held by B
    assert at[("sent", "D")] > max(at[("done", "B")], at[("done", "C")])
    assert result["tokens"] == 48 and result["requests"] == 4


def test_reset_empties_the_cache_before_the_free_and_the_causal_replay_and_sends_no_salt(tmp_path):
    # llama.cpp ignores cache_salt, so the bench restarts it (here: a marker in the request log)
    with ScriptedServer(reply) as server:
        records = chain(3, server.url)
        (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        result = bench(tmp_path, server.url.removesuffix("/v1"), concurrency=4,
                       reset=lambda: server.bodies.append("reset"))
        log = list(server.bodies)
    # reset, free replay (cold), warm replay, reset, causal replay (cold)
    assert [b if b == "reset" else "req" for b in log] == ["reset"] + ["req"] * 6 + ["reset"] + ["req"] * 3
    assert all("cache_salt" not in b for b in log if b != "reset")
    assert result["replay"]["cold"] is True and result["replay_warm"]["tokens"] == 36


def test_version_1_records_get_the_free_replay_only(tmp_path):
    with ScriptedServer(reply) as server:
        (tmp_path / "requests.jsonl").write_text("".join(json.dumps(record(i, i + 1)) + "\n" for i in range(2)))
        result = bench(tmp_path, server.url.removesuffix("/v1"), concurrency=2)
    assert "replay_causal" not in result and result["causal_skipped"] and result["replay"]["tokens"] == 24
