"""MemGPT: call parsing, functions, paging, heartbeats, FIFO summaries, QA fallback, budget and caching."""
from __future__ import annotations

import json

import numpy as np
import pytest

from scgmem.baselines.memgpt.method import (FAILED_HEARTBEAT, PREFIX, REQ_HEARTBEAT, SESSION_END, AgentState, MemGPT,
                              longest_content_word, parse_call)
from scgmem.api import Conversation
from scgmem.llm.doubles.fake import ScriptedLLM
from tests.baselines import CONV, BagEmbedder, conversation, measured_ingest

RNG = np.random.default_rng(0)


def call(function: str, heartbeat: bool | None = None, **params) -> str:
    """A reply as the model would write it after the primed prefix `{"function": "`."""
    if heartbeat is not None:
        params["request_heartbeat"] = heartbeat
    body = json.dumps({"function": function, "params": {"inner_thoughts": "ok", **params}})
    assert body.startswith(PREFIX)
    return body[len(PREFIX):]


def send(message: str = "done") -> str:
    return call("send_message", message=message)


def agent(script, **kw) -> MemGPT:
    return MemGPT(ScriptedLLM(script), BagEmbedder(), **kw)


def fresh(m: MemGPT) -> AgentState:
    m.speakers = ("Caroline", "Melanie")
    return m._fresh_state()


# ----------------------------------------------------------------------------- parsing
def test_parse_call_json_nested_and_top_level():
    assert parse_call(PREFIX + call("conversation_search", query="lake")) == (
        {"function": "conversation_search", "params": {"inner_thoughts": "ok", "query": "lake"}}, "json")
    nested = '{"function": {"function": "send_message", "params": {"message": "hi"}}}'
    assert parse_call(nested)[0] == {"function": "send_message", "params": {"message": "hi"}}
    flat = PREFIX + 'archival_memory_search", "query": "lake", "page": 1}'
    assert parse_call(flat) == ({"function": "archival_memory_search", "params": {"query": "lake", "page": 1}}, "json")
    cut = PREFIX + 'send_message", "params": {"inner_thoughts": "x", "message": "Caroline went to'
    assert parse_call(cut)[0]["params"]["message"] == "Caroline went to"  # clean_json completes it


def test_parse_call_regex_fallback_and_none():
    broken = PREFIX + 'conversation_search" "params": {"query": "support \\"group\\"", "page": 2, "request_heartbeat": true'
    parsed, how = parse_call(broken)
    assert how == "regex"
    assert parsed == {"function": "conversation_search",
                      "params": {"query": 'support "group"', "page": 2, "request_heartbeat": True}}
    assert parse_call(PREFIX + "I will now think about it.") == (None, "none")
    assert parse_call("") == (None, "none")


# ----------------------------------------------------------------------------- the loop
def test_bad_calls_give_errors_and_heartbeats_up_to_the_cap():
    m = agent(["I am not JSON at all"], qa_steps=5)
    m.ingest(CONV, RNG)  # per_session: each session's chain hits the ingest cap of 3
    assert m.llm.usage.snapshot()["other"]["calls"] == 6
    assert m.counters["failed_calls"] == 6 and m.counters["step_cap_hit"] == 2 and m.counters["call_none"] == 6
    queue = m.snapshot.queue
    results = [q["content"] for q in queue if q["kind"] == "result"]
    assert all(r.startswith('FUNCTION RETURN:\n{"status": "Failed", "message": "Could not parse') for r in results)
    assert sum(q["content"] == FAILED_HEARTBEAT for q in queue) == 4  # between steps, not after the last
    # the turns are still in recall: a failed ingest step is a no-op
    assert [e["dia_id"] for e in m.recall_store.entries] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    r = m.recall("What did Melanie paint?", budget_tokens=2000, rng=RNG)
    assert r.extras["qa_steps"] == 5 and m.counters["step_cap_hit"] == 3


def test_heartbeat_rules():
    # explicit request -> another step; send_message ends the chain
    m = agent([call("archival_memory_insert", heartbeat=True, content="Caroline went to a support group"), send()])
    m.ingest(conversation([[("Caroline", "support group")]]), RNG)
    assert m.llm.usage.snapshot()["other"]["calls"] == 2 and REQ_HEARTBEAT in [q["content"] for q in m.snapshot.queue]
    # per_turn: a non-send_message call right after a user turn gets a heartbeat (heartbeat_correction)
    m = agent([call("core_memory_append", name="human", content="Caroline: support group"), send()],
              ingest_mode="per_turn")
    m.ingest(conversation([[("Caroline", "support group")]]), RNG)
    assert m.llm.usage.snapshot()["other"]["calls"] == 2
    # per_session: the last message is the system alert, not a user message -> no correction
    m = agent([call("core_memory_append", name="human", content="Caroline: support group")])
    m.ingest(conversation([[("Caroline", "support group")]]), RNG)
    assert m.llm.usage.snapshot()["other"]["calls"] == 1
    assert m.snapshot.queue[-3]["content"] == SESSION_END
    assert m.snapshot.core.blocks["human"].endswith("\nCaroline: support group")
    assert m.deviations["ingest_per_session"] == 1


def test_regex_parsed_call_is_executed_and_counted():
    m = agent(['core_memory_append" "params": {"name": "human", "content": "Melanie paints"'])
    m.ingest(conversation([[("Melanie", "I paint")]]), RNG)
    assert m.snapshot.core.blocks["human"].endswith("Melanie paints")
    assert m.deviations["regex_function_call"] == 1 and m.counters["call_regex"] == 1


def test_per_turn_runs_the_agent_after_every_turn():
    m = agent([send()], ingest_mode="per_turn")
    m.ingest(CONV, RNG)
    assert m.llm.usage.snapshot()["other"]["calls"] == 4 and "ingest_per_session" not in m.deviations
    kinds = [q["kind"] for q in m.snapshot.queue]
    assert kinds == ["turn", "call", "result"] * 4


# ----------------------------------------------------------------------------- memory pressure
def test_summary_keeps_the_last_messages_and_never_starts_with_a_return():
    m = agent(["I summarised the chat."], keep_last=3)
    state = fresh(m)
    for i in range(4):
        m._append(state, "turn", f"[d] Caroline: message number {i} " + "word " * 20, f"D1:{i}")
    m._append(state, "call", '{"function": "conversation_search"}')
    m._append(state, "result", "FUNCTION RETURN:\n" + "r " * 40)
    for i in range(4, 7):
        m._append(state, "turn", f"[d] Melanie: reply {i}", f"D1:{i}")
    last3 = [dict(x) for x in state.queue[-3:]]
    assert m.summarize(state)
    head = state.queue[0]
    assert head["kind"] == "summary" and "I summarised the chat." in head["content"]
    assert "hidden from view due to conversation memory constraints" in head["content"]
    assert state.queue[1]["kind"] != "result" and state.queue[-3:] == last3
    # the cutoff would have landed on the function return: it moved past it
    assert [q["kind"] for q in state.queue] == ["summary", "turn", "turn", "turn"]
    # recursive: the next summary is asked to summarise the previous one too
    for i in range(7, 12):
        m._append(state, "turn", f"[d] Caroline: more {i} " + "word " * 20, f"D1:{i}")
    assert m.summarize(state)
    assert "I summarised the chat." in m.llm.prompts[-1] and "The following is a summary of the previous" in m.llm.prompts[-1]
    assert m.counters["summaries"] == 2


def test_summary_never_eats_the_kept_tail_even_if_it_starts_with_a_return():
    m = agent(["sum"], keep_last=3)
    state = fresh(m)
    for i in range(3):
        m._append(state, "turn", "t " * 30, f"D1:{i}")
    m._append(state, "call", "c")
    m._append(state, "result", "r")
    m._append(state, "turn", "t", "D1:9")
    m._append(state, "turn", "t", "D1:10")
    assert m.summarize(state)
    assert [q["kind"] for q in state.queue] == ["summary", "call", "result", "turn", "turn"]


def test_overflow_summarises_and_alerts_once():
    turns = [("Caroline" if i % 2 else "Melanie", f"sentence {i} about pottery and camping trips") for i in range(40)]
    m = agent(lambda p: "We chatted." if "summarize a history" in p else send(), window=1100, step_tokens=50)
    m.ingest(conversation([turns[:20], turns[20:]]), RNG)
    assert m.counters["summaries"] >= 1 and m.counters["pressure_alerts"] >= 1
    prompt = m._prompt(m.snapshot)
    assert m.llm.count_tokens(prompt) + 50 <= 1100
    assert m.snapshot.queue[0]["kind"] == "summary" and "We chatted." in m.snapshot.queue[0]["content"]
    # evicted turns stay in recall
    assert len(m.recall_store.entries) == 40
    assert m.counters["pressure_alerts"] <= m.counters["summaries"] + 1  # one alert per period


def test_empty_summary_is_a_counted_deviation():
    m = agent([""], keep_last=1)
    state = fresh(m)
    for i in range(4):
        m._append(state, "turn", "t " * 10, f"D1:{i}")
    assert m.summarize(state)
    assert m.deviations["empty_summary"] == 1 and "(no summary)" in state.queue[0]["content"]


# ----------------------------------------------------------------------------- questions
def test_qa_fallback_when_no_search_is_counted_and_used():
    m = agent([send("no idea")])
    m.ingest(CONV, RNG)
    rs = m.recall_batch(["What did Melanie paint by the lake?", "Who researched adoption?"],
                        budget_tokens=[2000, 2000], rngs=[RNG, RNG])
    assert m.deviations["qa_search_fallback"] == 2
    assert all(r.extras["fallback_used"] for r in rs) and rs[0].extras["draft"] == "no idea"
    assert [r.extras["fallback_query"] for r in rs] == ["paint", "researched"]  # names skipped
    # archival is empty; conversation_search("paint") finds Melanie's "I painted a sunrise..."
    assert "Search results:\nNo results found.\nShowing 1 of 1 results (page 0/0)" in rs[0].context
    assert "D1:2" in rs[0].dia_ids
    assert "adoption" in rs[1].context.lower()


def test_fallback_word_is_never_a_speaker_name():
    names = ("Caroline", "Melanie")
    # "Caroline" (8 letters) and "Caroline's" would win on length and match all her turns
    assert longest_content_word("What did Caroline paint?", names) == "paint"
    assert longest_content_word("What is Caroline's favourite book?", names) == "favourite"
    assert longest_content_word("When did Melanie meet Caroline?", names) == "meet"
    assert longest_content_word("What did Caroline paint?") == "Caroline"  # no names given: length alone decides
    # nothing but names left: the question itself (a substring search that finds nothing)
    assert longest_content_word("Who is Caroline?", names) == "Who is Caroline?"


def test_search_in_the_loop_is_used_without_fallback():
    calls = []

    def script(prompt):
        return send("answer") if "FUNCTION RETURN" in prompt.split("Question:")[-1] else \
            call("conversation_search", query="camping")

    m = agent(script)
    m.ingest(conversation([[("Caroline", "hello")]] * 3 + [[("Melanie", "We went camping with the kids.")]]), RNG)
    original = m.llm.generate
    m.llm.generate = lambda prompts, **kw: calls.append(len(prompts)) or original(prompts, **kw)
    rs = m.recall_batch(["q1", "q2", "q3"], budget_tokens=[3000] * 3, rngs=[RNG] * 3)
    assert calls == [1] * 6  # one question at a time, two steps each (MemGPT.recall_batch)
    for r in rs:
        assert not r.extras["fallback_used"] and r.extras["qa_steps"] == 2
        assert "Search results:" in r.context and "We went camping with the kids." in r.context
        assert "D4:1" in r.dia_ids
    assert "qa_search_fallback" not in m.deviations


def test_questions_start_from_the_post_ingest_snapshot():
    def script(prompt):
        tail = prompt.split("Question:")[-1] if "Question:" in prompt else ""
        if not tail:
            return send()
        if "FUNCTION RETURN" in tail:
            return call("conversation_search", query="lake")
        return call("core_memory_append", name="human", content="SECRET FACT", heartbeat=True)

    m = agent(script)
    m.ingest(CONV, RNG)
    def memory():  # the state without the (growing) counters
        return json.dumps({k: v for k, v in m.state_dict().items() if k not in ("counters", "deviations")})

    before = memory()
    a = m.recall("first?", budget_tokens=2000, rng=RNG)
    b = m.recall("second?", budget_tokens=2000, rng=RNG)
    assert "SECRET FACT" in a.context and "SECRET FACT" in b.context  # each question made its own edit ...
    assert b.context.count("SECRET FACT") == 1  # ... on a fresh copy
    assert memory() == before


def test_context_fits_the_budget_and_ids_follow_the_text():
    m = agent([send()])
    m.ingest(CONV, RNG)
    full = m.recall("What did Melanie paint by the lake?", budget_tokens=5000, rng=RNG)
    assert set(full.dia_ids) == {"D1:1", "D1:2", "D2:1", "D2:2"}
    assert "Core memory:\n<persona>" in full.context and "Recent messages:" in full.context
    for budget in (200, 120, 60, 15):
        r = m.recall("What did Melanie paint by the lake?", budget_tokens=budget, rng=RNG)
        assert m.llm.count_tokens(r.context) <= budget
        for dia_id in r.dia_ids:
            turn = next(t for s in CONV.sessions for t in s.turns if t.dia_id == dia_id)
            assert turn.text in r.context


def test_archival_hits_credit_their_provenance():
    def script(prompt):
        if "Question:" in prompt:
            tail = prompt.split("Question:")[-1]
            return send() if "FUNCTION RETURN" in tail else call("archival_memory_search", query="painting lake")
        if "painted" in prompt.split("<system>")[-1] and "Melanie paints" not in prompt:
            return call("archival_memory_insert", content="Melanie paints sunrises at the lake.")
        return send()

    m = agent(script)
    m.ingest(CONV, RNG)
    assert m.snapshot.archival.passages[0]["provenance"] == ["D1:1", "D1:2"]
    r = m.recall("What does Melanie paint?", budget_tokens=50, rng=RNG)
    assert "Melanie paints sunrises at the lake." in r.context and {"D1:1", "D1:2"} <= set(r.dia_ids)


def test_state_dict_round_trip_is_json_and_answers_alike():
    script = [call("archival_memory_insert", content="Caroline researches adoption agencies."), send()]
    m = agent(script)
    m.ingest(CONV, RNG)
    state = json.loads(json.dumps(m.state_dict()))
    other = agent(script)
    other.load_state_dict(state)
    assert other.snapshot.archival.matrix.shape == m.snapshot.archival.matrix.shape
    assert other.stats()["deviations"] == m.stats()["deviations"]
    m.llm._turn = other.llm._turn = 0
    a = m.recall("adoption?", budget_tokens=800, rng=RNG)
    b = other.recall("adoption?", budget_tokens=800, rng=RNG)
    assert (a.context, a.dia_ids) == (b.context, b.dia_ids)


def test_settings_and_argument_errors():
    m = agent([send()])
    s = m.memory_settings()
    assert s["ingest_mode"] == "per_session" and s["window"] == 8192 and s["keep_last"] == 3
    assert "qa_steps" not in s
    assert agent([send()], qa_steps=2).memory_settings() == s  # qa_steps is recall-only
    assert agent([send()], window=100_000).window == 8192  # capped at the LLM's window
    with pytest.raises(ValueError, match="method.ingest_mode must be 'per_turn' or 'per_session', got 'daily'"):
        agent([send()], ingest_mode="daily")
    with pytest.raises(ValueError, match="method.warning_frac must be in"):
        agent([send()], warning_frac=1.5)
    with pytest.raises(ValueError, match="embedder"):
        MemGPT(ScriptedLLM([send()]), None)


# ----------------------------------------------------------------------------- embedded model
@pytest.mark.slow
def test_embedded_model_end_to_end(smollm, minilm, locomo_path):
    from scgmem.data.locomo import load_locomo

    conv = next(c for c in load_locomo(locomo_path)[0] if c.sample_id == "conv-26")
    small = Conversation(conv.sample_id, conv.speaker_a, conv.speaker_b, conv.sessions[:2], ())
    m = MemGPT(smollm, minilm)
    ingest_s, calls = measured_ingest(m, small, smollm, RNG)
    rs = m.recall_batch(["What did Caroline research?", "When did Melanie paint a sunrise?"],
                        budget_tokens=[1500, 1500], rngs=[RNG, RNG])
    n_turns = sum(len(s.turns) for s in small.sessions)
    print(f"MemGPT on {n_turns} turns: {ingest_s:.1f}s, {calls / n_turns:.2f} calls/turn; stats {m.stats()}; "
          f"extras {[r.extras for r in rs]}")
    assert len(m.recall_store.entries) == n_turns and m.deviations["ingest_per_session"] == 2
    for r in rs:
        assert smollm.count_tokens(r.context) <= 1500 and r.dia_ids
        assert set(r.dia_ids) <= {t.dia_id for s in small.sessions for t in s.turns}
    json.dumps(m.state_dict())


@pytest.mark.parametrize("mode", ["per_session", "per_turn"])
def test_ingest_resumes_from_a_session_checkpoint(mode):
    whole = agent([send()], ingest_mode=mode)
    saved = {}
    whole.session_checkpoint = lambda index: saved.setdefault(index, json.loads(json.dumps(whole.state_dict())))
    whole.ingest(CONV, RNG)
    assert sorted(saved) == [1, 2] and saved[2] == json.loads(json.dumps(whole.state_dict()))
    resumed = agent([send()], ingest_mode=mode)
    resumed.load_state_dict(saved[1])
    resumed.resume_after_session = 1
    resumed.ingest(CONV, RNG)
    assert resumed.state_dict() == whole.state_dict()
    # Only session 2's steps ran again.
    assert resumed.llm.usage.snapshot()["other"]["calls"] < whole.llm.usage.snapshot()["other"]["calls"]
