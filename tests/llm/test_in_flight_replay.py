"""scripts/bench_replay.py: a run's profile from its recorded requests (hand-worked intervals), and a
replay against a scripted server whose tokens add up to the recorded ones; the ordered replay keeps
the run's happens-before."""
from __future__ import annotations

import json
import threading
import time

from scripts.bench_replay import bench, ordered_waits, replay, run_profile
from tests.llm.servers import ScriptedServer


def record(start, end, prompt=10, completion=2, server="http://127.0.0.1:1/v1"):
    return {"v": 1, "server": server, "path": "/v1/completions", "start": start, "end": end,
            "prompt_tokens": prompt, "completion_tokens": completion,
            "body": {"model": "tiny-served", "prompt": "p", "max_tokens": 2}}


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


def test_replay_sends_every_request_and_divides_the_rates(tmp_path):
    def reply(body):
        return 200, {"choices": [{"index": 0, "text": "a b", "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 2}}

    with ScriptedServer(reply) as server:
        records = [record(i, i + 1, server=server.url) for i in range(6)]  # one at a time, back to back
        (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        result = bench(tmp_path, None, concurrency=4)
        salts = [b.get("cache_salt") for b in server.bodies]
        sent = len(server.bodies)
    assert len(set(salts[:6])) == 1 and salts[0] and salts[6:12] == [None] * 6  # salted, then warm
    assert len(set(salts[12:])) == 1 and salts[12] not in (None, salts[0])  # the ordered replay: its own salt
    assert sent == 18 and result["replay"]["tokens"] == result["run"]["tokens"] == 72
    assert result["replay_ordered"]["tokens"] == 72
    assert result["order_cap"] == round(result["replay_ordered"]["tokens_per_s"] / result["replay"]["tokens_per_s"], 4)
    assert result["within_order"] == round(12.0 / result["replay_ordered"]["tokens_per_s"], 4)
    assert result["run"]["tokens_per_s"] == 12.0 and result["run"]["mean_in_flight"] == 1.0
    assert result["engine_utilization"] == round(12.0 / result["replay"]["tokens_per_s"], 4)


def lettered(start, end, letter, server="http://127.0.0.1:1/v1"):
    rec = record(start, end, server=server)
    return {**rec, "body": {**rec["body"], "prompt": letter}}


def test_ordered_waits_on_hand_worked_intervals():
    # A [0, 1] and B [0.5, 2] overlap; D [1.5, 5] starts after A's end, before B's; C [3, 4] after both.
    # Start order A B D C; end order A B C D: D waits for 1 end (A), C for 2 (A, B)
    in_order, ranks, waits = ordered_waits([lettered(0, 1, "A"), lettered(0.5, 2, "B"), lettered(3, 4, "C"),
                                            lettered(1.5, 5, "D")])
    assert [r["body"]["prompt"] for r in in_order] == ["A", "B", "D", "C"]
    assert ranks == [0, 1, 3, 2] and waits == [0, 0, 1, 2]


def test_ordered_replay_sends_a_request_only_after_those_it_followed_in_the_run():
    events, lock = [], threading.Lock()

    def reply(body):
        with lock:
            events.append(("sent", body["prompt"]))
        time.sleep(0.2)  # long enough that the free replay sends all four before any is done
        with lock:
            events.append(("done", body["prompt"]))
        return 200, {"choices": [{"index": 0, "text": "a b", "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 2}}

    with ScriptedServer(reply) as server:
        records = [lettered(0, 1, "A", server.url), lettered(0.5, 2, "B", server.url),
                   lettered(3, 4, "C", server.url), lettered(1.5, 5, "D", server.url)]
        result = replay(records, None, concurrency=8, salt=None, ordered=True)
        # the free replay of the same records waits for nothing: C goes out before A is done
        events_ordered, events[:] = list(events), []
        replay(records, None, concurrency=8, salt=None)
    at = {e: n for n, e in enumerate(events_ordered)}
    assert at[("sent", "D")] > at[("done", "A")]
    assert at[("sent", "C")] > max(at[("done", "A")], at[("done", "B")])
    assert result["tokens"] == 48
    assert events.index(("sent", "C")) < events.index(("done", "A"))


def test_reset_empties_the_cache_before_the_free_and_the_ordered_replay_and_sends_no_salt(tmp_path):
    # llama.cpp ignores cache_salt, so the bench restarts it (here: a marker in the request log)
    def reply(body):
        return 200, {"choices": [{"index": 0, "text": "a b", "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 2}}

    with ScriptedServer(reply) as server:
        records = [record(i, i + 1, server=server.url) for i in range(3)]
        (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        result = bench(tmp_path, None, concurrency=4, reset=lambda: server.bodies.append("reset"))
        log = list(server.bodies)
    # reset, free replay (cold), warm replay, reset, ordered replay (cold)
    assert [b if b == "reset" else "req" for b in log] == ["reset"] + ["req"] * 6 + ["reset"] + ["req"] * 3
    assert all("cache_salt" not in b for b in log if b != "reset")
    assert result["replay"]["cold"] is True and result["replay_warm"]["tokens"] == 36
