"""`model.max_in_flight`: one limiter bounds every request of a served model, fairly across servers,
without deadlock under nested pools; constrained results do not depend on the bound (fake vLLM server)."""
from __future__ import annotations

import json
import random
import threading
import time
import zlib

import pytest

from scgmem.core.schema import TokenTrie
from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.key_rule import DONE, KeyRule, RowState
from scgmem.llm.served.constrained import ConstrainedCalls
from scgmem.llm.served.limiter import InFlightLimiter
from scgmem.llm.served.recorder import RequestRecorder
from scgmem.llm.served.request_profile import read_records
from scgmem.llm.served.transport import ServerPool
from scgmem.llm.served.engines.vllm import VLLMDialect
from tests.llm.servers import ScriptedServer

PROMPT_LEN = 5  # every test prompt has this many ids, so the fake server knows where a list starts
TERMINATOR, END = 9, 1


def test_limiter_bounds_what_is_in_flight_and_serves_everyone():
    limiter, live, peak, lock = InFlightLimiter(3), [0], [0], threading.Lock()

    def one(_):
        with limiter.slot():
            with lock:
                live[0] += 1
                peak[0] = max(peak[0], live[0])
            time.sleep(0.005)
            with lock:
                live[0] -= 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] <= 3 and limiter.peak <= 3 and limiter.granted == 24 and sum(limiter.in_flight) == 0


def test_a_freed_slot_goes_to_the_server_with_fewest_in_flight():
    limiter, order = InFlightLimiter(2, servers=2), []
    holding = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def hold(k):
        with limiter.slot(0):
            holding[k].set()
            release[k].wait()

    def wait_for(server, name):
        with limiter.slot(server):
            order.append(name)

    holders = [threading.Thread(target=hold, args=(k,)) for k in range(2)]
    for t, h in zip(holders, holding):  # server 0 holds both slots
        t.start()
        h.wait()
    waiters = [threading.Thread(target=wait_for, args=(0, "a0")), threading.Thread(target=wait_for, args=(0, "b0")),
               threading.Thread(target=wait_for, args=(1, "c1"))]
    for n, t in enumerate(waiters, 1):  # queued in this order: two for server 0, then one for server 1
        t.start()
        while len(limiter._waiting) < n:
            time.sleep(0.001)
    release[0].set()  # one slot frees while server 0 still has one in flight: server 1's request first
    holders[0].join()
    while len(order) < 1:
        time.sleep(0.001)
    release[1].set()
    for t in [holders[1], *waiters]:
        t.join()
    assert order == ["c1", "a0", "b0"]  # then server 0's, in the order they came


def test_limiter_refuses_a_bad_bound():
    with pytest.raises(ValueError, match="max_in_flight"):
        InFlightLimiter(0)


class FakeVLLM:
    """A vLLM /v1/completions for the vllm dialect: deterministic raw log-probs of (context, token),
    greedy continuations that obey the key rule, prompt_logprobs; each reply after a random delay."""

    def __init__(self, constraint: KeyConstraint, seed: int) -> None:
        self.c, self.rule = constraint, KeyRule.of(constraint)
        self.rand, self.lock = random.Random(seed), threading.Lock()

    @staticmethod
    def lp(context, token) -> float:
        return -((zlib.crc32(json.dumps([list(context[-4:]), token]).encode()) % 997) / 97.0) - 0.01

    def reply(self, body):
        with self.lock:
            delay = self.rand.random() * 0.004
        time.sleep(delay)  # arrival order differs from sending order
        prompt = body["prompt"]
        if "logprob_token_ids" in body:
            top = {f"token_id:{t}": self.lp(prompt, t) for t in body["logprob_token_ids"]}
            choice = {"logprobs": {"top_logprobs": [top], "tokens": ["token_id:0"]}}
        elif "prompt_logprobs" in body:
            choice = {"prompt_logprobs": [None] + [{str(prompt[j]): {"logprob": self.lp(prompt[:j], prompt[j])}}
                                                   for j in range(1, len(prompt))]}
        else:  # a greedy continuation under the grammar: replay the list so far, then one key
            walk = RowState(self.c.trie.ROOT)
            for t in prompt[PROMPT_LEN:]:
                walk = self.rule.step(walk, t)
            out = []
            while len(out) < body["max_tokens"]:
                allowed = self.rule.allowed(walk)
                t = max(allowed, key=lambda a: (self.lp(prompt + out, a), -a))
                out.append(t)
                walk = self.rule.step(walk, t)
                if t in (TERMINATOR, END) or walk.node == DONE:
                    break
            choice = {"token_ids": out}
        return 200, {"choices": [{"index": 0, "text": "", "finish_reason": "stop", **choice}]}


def wide_constraint() -> KeyConstraint:
    """300 one-token keys at the root (wider than vLLM's 128 ids a request: asked in chunks) and a few longer."""
    trie = TokenTrie(vocab_size=400)
    for t in range(10, 310):
        trie.insert([t, TERMINATOR])
    for key in ([10, 11, TERMINATOR], [12, 13, 14, TERMINATOR], [20, 21, TERMINATOR]):
        trie.insert(key)
    return KeyConstraint(trie, terminator=TERMINATOR, end_id=END, max_keys=3)


def constrained_run(max_in_flight: int, num_beams: int, seed: int):
    constraint = wide_constraint()
    prompts = [[100 + i, 2, 3, 4, 5 + i] for i in range(4)]
    assert all(len(p) == PROMPT_LEN for p in prompts)
    with ScriptedServer(FakeVLLM(constraint, seed).reply) as server:
        pool = ServerPool([server.url], max_in_flight=max_in_flight, retries=0)
        calls = ConstrainedCalls(VLLMDialect(server.model), pool, eos_ids=[END])
        gens = calls.generate(prompts, constraint, max_new_tokens=8, temperature=0.0, seeds=[0] * 4,
                              num_beams=num_beams, num_return_sequences=num_beams, decode=str)
    return [[(g.token_ids, round(g.logprob, 6), g.cut) for g in row] for row in gens], pool


@pytest.mark.parametrize("num_beams", [1, 3])
def test_constrained_lists_do_not_depend_on_max_in_flight(num_beams):
    one, pool1 = constrained_run(1, num_beams, seed=1)
    eight, pool8 = constrained_run(8, num_beams, seed=2)  # another arrival order too
    assert one == eight
    assert all(row[0][0] for row in one)  # every prompt got a non-empty list
    assert pool1.limiter.peak == 1  # nested pools (prompts, beams, id chunks) under one slot: no deadlock
    assert 1 < pool8.limiter.peak <= 8


def test_the_recorder_writes_every_request_with_its_token_counts(tmp_path):
    constraint = wide_constraint()
    with ScriptedServer(FakeVLLM(constraint, 0).reply) as server:
        pool = ServerPool([server.url], max_in_flight=4, retries=0)
        pool.recorder = RequestRecorder(tmp_path / "requests.jsonl")
        ConstrainedCalls(VLLMDialect(server.model), pool, eos_ids=[END]).generate(
            [[7, 2, 3, 4, 5]], constraint, max_new_tokens=8, temperature=0.0, seeds=[0], num_beams=2,
            num_return_sequences=1, decode=str)
        pool.recorder.close()
        sent = len(server.bodies)
    records = read_records(tmp_path / "requests.jsonl")
    assert len(records) == sent == pool.limiter.granted
    assert all(r["path"] == "/v1/completions" and r["end"] >= r["start"] for r in records)
    assert all(r["prompt_tokens"] == len(r["body"]["prompt"]) for r in records)  # no usage: the ids sent


def test_read_records_names_the_bad_line(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text('{"v": 1, "path": "/v1/completions", "body": {}, "start": 1, "end": 2}\nnot json\n')
    with pytest.raises(ValueError, match=r"requests.jsonl:2: not JSON"):
        read_records(path)
