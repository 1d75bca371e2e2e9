"""The served backend against a scripted local server: requests state every setting, results come
in prompt order whatever the arrival order, faults retry or stop with one line naming the URL,
primed prefixes are handled, and the key never reaches the outputs."""
from __future__ import annotations

import json
import re
import threading
import time

import pytest

from scgmem.llm.served.http_client import ServerError
from scgmem.llm.served.free_text import strip_echo
from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM
from tests.llm.servers import ScriptedServer, completion, free_port


def echo(body):
    return 200, completion("re: " + body["messages"][-1]["content"])


def make(server, **kw):
    kw.setdefault("tokenizer", None)
    if kw["tokenizer"] is None:
        kw.pop("tokenizer")
        return _no_tokenizer(server.url, **kw)
    return OpenAICompatibleLLM(server.url, server.model, **kw)


def _no_tokenizer(url, **kw):
    # the scripted server has no /tokenize; building the backend asks no server (issue 59), so the
    # tests that never count tokens use it without model.tokenizer (its `ready` would refuse)
    return OpenAICompatibleLLM(url, "tiny-served", **kw)


def test_every_setting_is_sent_and_recorded():
    with ScriptedServer(echo) as server:
        llm = make(server, retries=0, top_p=0.9, seed=5)
        with llm.usage.under("answer"):
            gens = llm.generate([llm.render("hi"), llm.render("ho")], max_new_tokens=12, temperature=0.7,
                                seeds=[1, 2], stop=["\n"])
    assert [g[0].text for g in gens] == ["re: hi", "re: ho"]
    body = server.bodies[-1]
    assert {k: body[k] for k in ("max_tokens", "temperature", "top_p", "n", "stop")} == \
        {"max_tokens": 12, "temperature": 0.7, "top_p": 0.9, "n": 1, "stop": ["\n"]}
    assert sorted(b["seed"] for b in server.bodies if "seed" in b) == [1, 2]
    assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}  # the chat policy
    report = llm.generation_report()
    assert report["calls"]["answer/sampled"]["calls"] == 2
    assert report["server"]["models_reported"] == ["tiny-served"]
    usage = llm.usage.snapshot()["answer"]
    assert usage["calls"] == 2 and usage["prompt_tokens"] == 14 and usage["generated_tokens"] == 4


def test_results_in_prompt_order_whatever_the_arrival_order():
    def slow_first(body):  # the earlier prompt answers last
        time.sleep(0.3 if body["messages"][-1]["content"] == "0" else 0.0)
        return echo(body)

    with ScriptedServer(slow_first) as server:
        llm = make(server, max_concurrency=4)
        gens = llm.generate([llm.render(str(i)) for i in range(6)])
    assert [g[0].text for g in gens] == [f"re: {i}" for i in range(6)]


def test_requests_in_flight_are_bounded():
    live, peak, lock = [0], [0], threading.Lock()

    def counting(body):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        return echo(body)

    with ScriptedServer(counting) as server:
        make(server, max_concurrency=3).generate([f"p{i}" for i in range(12)])
    assert 1 < peak[0] <= 3


def test_retries_on_500_and_429_then_succeeds():
    calls = []

    def flaky(body):
        calls.append(1)
        return (500, {"error": "busy"}) if len(calls) == 1 else (429, {"error": "slow"}) if len(calls) == 2 else echo(body)

    with ScriptedServer(flaky) as server:
        [[gen]] = make(server, retries=3, backoff_s=0.01).generate(["x"])
    assert gen.text == "re: x" and len(calls) == 3


@pytest.mark.parametrize("reply, needle", [
    (lambda b: (500, {"error": "boom"}), "HTTP 500"),
    (lambda b: (200, b"{not json"), "not JSON"),
    (lambda b: (200, {"choices": []}), "reply has no choices[0] text"),
    (lambda b: (400, {"error": "bad max_tokens"}), "HTTP 400"),
])
def test_faults_stop_with_one_line_naming_the_url(reply, needle):
    with ScriptedServer(reply) as server:
        llm = make(server, retries=1, backoff_s=0.01)
        with pytest.raises(ServerError) as e:
            llm.generate(["x"])
    message = str(e.value)
    assert "\n" not in message and needle in message and server.url in message


def test_building_the_backend_reaches_no_server():
    """Construction is cheap and offline: the servers are reached in `ready` (the harness's one
    readiness step), never in __init__; a server that counts every request sees none."""
    with ScriptedServer(echo) as server:
        llm = OpenAICompatibleLLM([server.url, server.url.replace("127.0.0.1", "localhost")], server.model,
                                  retries=0)
        assert server.bodies == [] and server.gets == []
        with pytest.raises(ValueError, match="model.tokenizer is required"):  # no tokenizer, no /tokenize
            llm.ready()
    assert server.gets == ["/v1/models", "/v1/models"]  # both servers of the pool, then /tokenize was tried
    assert {b["_path"] for b in server.bodies} <= {"/tokenize", "/v1/tokenize"} and server.bodies


def test_unreachable_server_is_one_line_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(ServerError, match=r"^http://127\.0\.0\.1:\d+/v1/models: unreachable after 2 tries"):
        OpenAICompatibleLLM(url, "m", retries=1, backoff_s=0.01).ready()


def test_without_tokenizer_or_tokenize_endpoint_it_refuses():
    with ScriptedServer(echo) as server:
        with pytest.raises(ValueError, match="model.tokenizer is required: .* has no /tokenize endpoint"):
            OpenAICompatibleLLM(server.url, server.model, retries=0).ready()


def test_unknown_model_id_and_missing_key_are_refused(monkeypatch):
    with ScriptedServer(echo) as server:
        with pytest.raises(ValueError, match="model.model_id=other: not served"):
            OpenAICompatibleLLM(server.url, "other").ready()
        monkeypatch.delenv("SCGMEM_TEST_KEY", raising=False)
        with pytest.raises(ValueError, match="SCGMEM_TEST_KEY is not set"):
            OpenAICompatibleLLM(server.url, server.model, api_key_env="SCGMEM_TEST_KEY")
        monkeypatch.setenv("SCGMEM_TEST_KEY", "sk-secret")
        llm = make(server, api_key_env="SCGMEM_TEST_KEY")
        llm.generate(["x"])
    assert server.bodies[-1]["_auth"] == "Bearer sk-secret"
    assert "sk-secret" not in json.dumps(llm.generation_report())


def test_primed_prefix_dropped_and_its_echo_removed():
    with ScriptedServer(lambda b: (200, completion('{ "answer":  "Paris"}'))) as server:
        llm = make(server)
        prompt = llm.render("Capital?", assistant_prefix='{"answer": "')
        [[gen]] = llm.generate([prompt])
    assert server.bodies[-1]["messages"][-1]["role"] == "user"  # no partial assistant message sent
    assert gen.text == 'Paris"}'


def test_primed_prefix_continued_with_prefill():
    with ScriptedServer(lambda b: (200, completion('Paris"}'))) as server:
        llm = make(server, prefill=True)
        [[gen]] = llm.generate([llm.render("Capital?", assistant_prefix='{"answer": "')])
    body = server.bodies[-1]
    assert body["messages"][-1] == {"role": "assistant", "content": '{"answer": "'}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert gen.text == 'Paris"}'


def test_strip_echo():
    assert strip_echo('{"function": "send_message"}', '{"function": "') == 'send_message"}'
    assert strip_echo("plain prose", '{"function": "') == "plain prose"


def test_token_level_calls_name_the_local_backend():
    with ScriptedServer(echo) as server:
        llm = make(server)
        with pytest.raises(TypeError, match="use the local backend"):
            llm.generate(["x"], num_beams=5, num_return_sequences=5)
        # a constraint without an engine dialect names the missing feature in one line
        from scgmem.core.schema import TokenTrie
        from scgmem.llm.constraint_spec import KeyConstraint
        from scgmem.llm.served.engines.dialect import Unsupported

        trie = TokenTrie(vocab_size=10)
        trie.insert([3, 9])
        from scgmem.llm.served import engines

        with pytest.raises(Unsupported, match=re.escape(f"model.engine={engines.one_of()} ")):
            llm.generate(["x"], constraint=KeyConstraint(trie, terminator=9, end_id=1))


def test_memory_cache_key_names_the_model_not_the_url():
    from scgmem.harness.cache import memory_key

    class Method:
        def memory_settings(self):
            return {}

    class Conv:
        turns = []

    keys = []
    for _ in range(2):  # two servers on two ports, the same served model
        with ScriptedServer(echo) as server:
            keys.append(memory_key(Method(), make(server), 0, Conv()))
    assert keys[0] == keys[1]


def test_completions_api_sends_the_locally_rendered_prompt_with_its_prefix():
    from scgmem.llm.loading import resolve_model_dir
    from scgmem.llm.loading import EMBEDDED

    reply = {"model": "tiny-served", "choices": [{"index": 0, "text": 'Paris"}', "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 30, "completion_tokens": 3}}
    with ScriptedServer(lambda b: (200, reply)) as server:
        llm = make(server, api="completions", tokenizer=resolve_model_dir(None, **EMBEDDED))
        prompt = llm.render("Capital?", assistant_prefix='{"answer": "')
        [[gen]] = llm.generate([prompt], max_new_tokens=9)
    body = server.bodies[-1]
    assert body["_path"] == "/v1/completions" and body["prompt"] == prompt and prompt.endswith('{"answer": "')
    assert "<|im_start|>assistant" in prompt and body["max_tokens"] == 9
    assert gen.text == 'Paris"}' and gen.n_prompt_tokens == 30


def test_completions_api_needs_a_local_tokenizer():
    with pytest.raises(ValueError, match="model.api=completions .* set model.tokenizer"):
        OpenAICompatibleLLM("http://127.0.0.1:1/v1", "m", api="completions")


def test_several_servers_share_the_requests_and_a_dead_one_is_left(tmp_path):
    """model.base_url lists servers of one model: requests spread over them; a server that stays
    unreachable is marked dead and its requests go to the others, in prompt order."""
    from tests.llm.servers import free_port

    with ScriptedServer(echo) as a, ScriptedServer(echo) as b:
        dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
        llm = _no_tokenizer([a.url, dead, b.url], retries=0, max_concurrency=3)
        prompts = [f"question {i}" for i in range(9)]
        out = llm.generate(prompts, max_new_tokens=4)
        assert [g.text for (g,) in out] == [f"re: {p}" for p in prompts]
        report = llm.generation_report()["server"]["pool"]
        assert report["dead"] == [dead] and len(a.bodies) > 0 and len(b.bodies) > 0
        assert len(a.bodies) + len(b.bodies) == 9
