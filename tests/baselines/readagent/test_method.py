"""ReadAgent (baselines/readagent/method.py): pagination, gists, look-up, budget, cache, on canned and garbage LLM output."""
from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import replace

import numpy as np
import pytest

from scgmem.baselines.readagent.method import ReadAgent
from scgmem.baselines.readagent.prompts import parse_break_point, parse_lookup_brackets, parse_lookup_lenient, parse_sequential
from scgmem.api import Conversation, Session, Turn
from scgmem.data.locomo import load_locomo
from scgmem.llm.doubles.fake import ScriptedLLM
from tests.baselines import CountingLLM

DATE = "1:56 pm on 8 May, 2023"


class BagEmbedder:
    """Deterministic bag-of-words vectors (crc32 buckets), unit length."""

    name = "bag"

    def encode(self, texts):
        out = np.zeros((len(texts), 4096), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, zlib.crc32(w.encode()) % 4096] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{k}" for k in range(n))


def make_conv(n_turns: int = 20, turn_words: int = 99, sessions: int = 1) -> Conversation:
    """`sessions` sessions of `n_turns` turns; each paragraph `A: ...` has turn_words + 1 words."""
    out = []
    for s in range(1, sessions + 1):
        date = f"1:56 pm on {s} May, 2023"
        turns = tuple(Turn(f"D{s}:{t}", "AB"[(t - 1) % 2], words(f"s{s}t{t}w", turn_words), s, date)
                      for t in range(1, n_turns + 1))
        out.append(Session(s, date, turns))
    return Conversation("conv-x", "A", "B", tuple(out), ())


def scripted(break_reply="garbage", gist_reply="short gist", lookup_reply="nothing"):
    def reply(prompt: str) -> str:
        if "Break point" in prompt:
            return break_reply(prompt) if callable(break_reply) else break_reply
        if "shorten the following passage" in prompt:
            return gist_reply(prompt) if callable(gist_reply) else gist_reply
        return lookup_reply(prompt) if callable(lookup_reply) else lookup_reply
    return reply


def ingested(conv=None, **kw) -> tuple[ReadAgent, CountingLLM]:
    llm = CountingLLM(scripted(**{k: kw.pop(k) for k in ("break_reply", "gist_reply", "lookup_reply") if k in kw}))
    agent = ReadAgent(llm, kw.pop("embedder", None), **kw)
    agent.ingest(conv or make_conv(), np.random.default_rng(0))
    return agent, llm


# ---------------------------------------------------------------------------- parsers
def test_parsers_on_canned_and_garbage_replies():
    assert parse_break_point("Break point: <12>\n Because the topic changes") == 12
    assert parse_break_point("I would pause at <7>, then <9>") == 7
    assert parse_break_point("Break point: 12") is None
    assert parse_lookup_brackets("I want to look up Page [2, 0, 2, 9] to ...", 5) == [2, 0]
    assert parse_lookup_brackets("] then [1]", 5) == []  # first ']' before first '[' (demo parser)
    assert parse_lookup_brackets("Page [x, y]", 5) == []
    assert parse_lookup_lenient("I'd read page 3 and page 1, also pages 4, 2 and 3", 5) == [3, 1, 4, 2]
    assert parse_lookup_lenient("no idea, 3 maybe", 5) == []
    assert parse_sequential("Page 2", 4) == ("page", 2)
    assert parse_sequential("STOP. Page 2 is enough", 4) == ("stop", None)
    assert parse_sequential("Page 2, then STOP", 4) == ("page", 2)
    assert parse_sequential("I pick 3", 4) == ("lenient", 3)
    assert parse_sequential("Page 9", 4) == ("fail", None)


# ---------------------------------------------------------------------------- pagination
def test_breakpoint_garbage_gives_the_reference_fixed_pages():
    # 1 DATE paragraph of 7 words + 20 turns of 100 words. By hand (600/280/350):
    # [0,7) 607 words; [7,13) 600; [13,19) 600; [19,21) 200 < 350 -> last page without a call.
    agent, llm = ingested(break_reply="I think the story pauses here.")
    assert agent.pages == [(0, 7), (7, 13), (13, 19), (19, 21)]
    assert agent.counters["pagination_calls"] == 3
    assert agent.deviations["break_point_parse_failure"] == 3
    assert llm.calls[:3] == [1, 1, 1]  # pagination is sequential: one prompt per call


def test_valid_breakpoint_is_used_and_out_of_range_falls_back_to_j():
    agent, _ = ingested(break_reply="Break point: <5>\n Because ...")
    # [0,5) chosen; later passages start at 5 and beyond, so <5> is <= i: fall back to j.
    assert agent.pages == [(0, 5), (5, 11), (11, 17), (17, 21)]
    assert agent.counters["break_points_parsed"] == 1
    assert agent.deviations["break_point_out_of_range"] == 3
    assert "break_point_parse_failure" not in agent.deviations


def test_pagination_prompt_shows_labels_previous_page_and_next_paragraph():
    def first_label(prompt):  # a model that always picks the first label of the passage
        label = re.findall(r"<(\d+)>", prompt.split("Passage:")[1])[0]
        return f"Break point: <{label}>"

    agent, llm = ingested(break_reply=first_label)
    # Labels start once the words reach 280: before paragraph 3 (7+100+100+100 = 307).
    assert agent.pages[0] == (0, 3)
    first, second = llm.prompts[0], llm.prompts[1]
    assert "<3>" in first and "<2>" not in first.split("Passage:")[1]
    assert "s1t7w98\n...\n" in first  # the next paragraph (turn 7), followed by "..."
    assert "...\nDATE: 1:56 pm on 1 May, 2023\nA: s1t1w0" in second  # previous page, prefixed "..."
    assert all(s < e for s, e in agent.pages) and agent.pages[-1][1] == len(agent.paragraphs)
    assert [p for s, e in agent.pages for p in range(s, e)] == list(range(len(agent.paragraphs)))


# ---------------------------------------------------------------------------- gists
def test_gists_batched_in_one_call_and_prefixed_with_page_and_dates():
    agent, llm = ingested(conv=make_conv(sessions=2), gist_reply="They talked.")
    n = len(agent.pages)
    assert llm.calls.count(n) >= 1 and agent.counters["gist_calls"] == n
    assert agent.gist_sources == ["llm"] * n
    unit = agent._unit(0, expanded=False)
    assert unit == "<Page 0> [1:56 pm on 1 May, 2023]\nThey talked."
    straddling = [p for p in range(n) if len(agent._page_dates(p)) == 2]
    assert straddling and "1 May, 2023; 1:56 pm on 2 May, 2023]" in agent._unit(straddling[0], False)


@pytest.mark.parametrize("reply", ["", "   ", "ECHO"])
def test_empty_or_too_long_gist_is_replaced_by_first_12_words_and_counted(reply):
    echo = (lambda p: p.split("Passage:\n")[1]) if reply == "ECHO" else reply
    agent, _ = ingested(gist_reply=echo, gist_max_new_tokens=2000)
    assert agent.gist_sources == ["fallback"] * len(agent.pages)
    assert agent.deviations["gist_replaced"] == len(agent.pages)
    lines = agent.gists[0].split("\n")
    assert lines[0] == "A: " + words("s1t1w", 12)  # speaker + the turn's first 12 words
    assert len(lines) == 6  # the DATE paragraph is not a turn


def test_looping_gist_loses_repeated_lines_and_is_counted():
    agent, _ = ingested(gist_reply="Caroline: Hey Mel!\n\nCaroline: Hey Mel!\ncaroline:  hey mel!\nThey talk.")
    assert agent.gists[0] == "Caroline: Hey Mel!\nThey talk." and agent.gist_sources[0] == "llm"
    assert agent.deviations["gist_repeated_lines"] == len(agent.pages)
    agent, _ = ingested(gist_reply="A\nA", gist_strip_repeats=False)
    assert agent.gists[0] == "A\nA" and "gist_repeated_lines" not in agent.deviations


def test_echo_cut_at_the_token_cap_is_kept_but_reported():
    # A 192-token cut of an echoed 600-word page is under 0.8 x the page, so it is kept;
    # the last page has 200 words, so its 192-word cut is >= 0.8 x 200 and is replaced.
    agent, _ = ingested(gist_reply=lambda p: p.split("Passage:\n")[1])
    assert agent.gist_sources == ["llm", "llm", "llm", "fallback"]
    assert agent.counters["gists_at_token_cap"] == 4


def test_gist_of_just_under_the_ratio_is_kept():
    # Page 0 has 607 words: a 485-word gist (< 0.8 x 607 = 485.6) stays, 486 words is replaced.
    agent, _ = ingested(gist_reply=lambda p: words("g", 485), gist_max_new_tokens=1000)
    assert agent.gist_sources[0] == "llm"
    agent, _ = ingested(gist_reply=lambda p: words("g", 486), gist_max_new_tokens=1000)
    assert agent.gist_sources[0] == "fallback"


# ---------------------------------------------------------------------------- look-up
def test_bracket_lookup_expands_pages_in_place():
    agent, llm = ingested(lookup_reply="I want to look up Page [2, 0] to check.", retrieved_ids="context")
    r = agent.recall("What did A say?", budget_tokens=10_000, rng=np.random.default_rng(0))
    blocks = r.context.split("<Page ")[1:]
    assert [b.split(">")[0] for b in blocks] == ["0", "1", "2", "3"]  # page order kept
    assert "s1t1w98" in blocks[0] and "s1t13w0" in blocks[2]  # raw pages 0 and 2
    assert blocks[1].endswith("short gist\n") and blocks[3].endswith("short gist")
    assert r.dia_ids == [f"D1:{t}" for t in range(1, 21)]  # retrieved_ids=context: raw or gist
    assert not agent.deviations.get("lookup_parse_failure")
    assert "Page 3" in llm.prompts[-1] and "What did A say?" in llm.prompts[-1]
    assert agent.counters["pages_expanded"] == 2


def test_retrieved_ids_are_only_the_reread_pages_by_default():
    agent, _ = ingested(lookup_reply="Page [2]")
    r = agent.recall("q", budget_tokens=10_000, rng=None)
    assert "short gist" in r.context  # the other pages' gists are shown but not counted
    assert r.dia_ids == [f"D1:{t}" for t in range(13, 19)]
    assert agent.stats()["retrieved_ids"] == "expanded"


def test_retrieved_ids_empty_when_nothing_is_reread():
    agent, _ = ingested(lookup_reply="The answer is probably yes!!")
    assert agent.recall("q", budget_tokens=10_000, rng=None).dia_ids == []


def test_lenient_lookup_parse_is_a_counted_deviation():
    agent, _ = ingested(lookup_reply="I would like to read page 3 and page 1.")
    r = agent.recall("q", budget_tokens=10_000, rng=None)
    assert "s1t19w0" in r.context and "s1t7w0" in r.context
    assert agent.deviations["lookup_lenient_parse"] == 1


def test_lookup_garbage_expands_nothing_and_is_counted():
    agent, _ = ingested(lookup_reply="The answer is probably yes!!")
    r = agent.recall("q", budget_tokens=10_000, rng=None)
    assert r.context.count("short gist") == len(agent.pages)
    assert agent.deviations["lookup_parse_failure"] == 1
    assert agent.counters["pages_expanded"] == 0


def test_lookup_capped_at_n_pages():
    agent, _ = ingested(lookup_reply="Page [0, 1, 2, 3]", max_lookup_pages=2)
    r = agent.recall("q", budget_tokens=10_000, rng=None)
    assert r.context.count("short gist") == 2
    assert agent.deviations["lookup_capped"] == 1


def test_embed_fallback_takes_top_pages_by_cosine():
    agent, _ = ingested(lookup_reply="???", lookup_fallback="embed", embedder=BagEmbedder(), max_lookup_pages=1)
    r = agent.recall("s1t14w3 s1t15w7 s1t16w1", budget_tokens=10_000, rng=None)  # words of page 2
    assert "s1t14w3" in r.context and r.context.count("short gist") == 3
    assert agent.deviations["lookup_parse_failure"] == 1 and agent.deviations["lookup_embed_fallback"] == 1


def test_embed_fallback_needs_an_embedder():
    with pytest.raises(ValueError, match="lookup_fallback"):
        ReadAgent(ScriptedLLM(["x"]), None, lookup_fallback="embed")


def test_recall_batch_makes_one_lookup_call_for_all_questions():
    agent, llm = ingested(lookup_reply="Page [1]")
    before = len(llm.calls)
    out = agent.recall_batch(["q1", "q2", "q3"], budget_tokens=[10_000] * 3, rngs=[None] * 3)
    assert llm.calls[before:] == [3] and len(out) == 3
    assert agent.counters["lookup_calls"] == 3


def test_sequential_lookup_reads_pages_until_stop():
    def reply(prompt):
        if "(DO NOT ask to read them again):\nNone" in prompt:
            return "Page 1"
        if "(DO NOT ask to read them again):\n1\n" in prompt:
            return "Page 3"
        return "STOP"

    agent, llm = ingested(lookup_reply=reply, lookup="sequential")
    r = agent.recall("q", budget_tokens=10_000, rng=None)
    assert r.context.count("short gist") == 2 and "s1t19w0" in r.context and "s1t7w0" in r.context
    assert agent.counters["lookup_calls"] == 3
    # The second prompt already shows page 1 expanded.
    assert "s1t7w0" in llm.prompts[-2]


def test_sequential_garbage_and_repeats_stop_and_count():
    agent, _ = ingested(lookup_reply="hmm", lookup="sequential")
    agent.recall("q", budget_tokens=10_000, rng=None)
    assert agent.deviations["lookup_parse_failure"] == 1 and agent.counters["lookup_calls"] == 1
    agent, _ = ingested(lookup_reply="Page 2", lookup="sequential")
    r = agent.recall("q", budget_tokens=10_000, rng=None)
    assert agent.deviations["lookup_parse_failure"] == 1 and r.context.count("short gist") == 3


# ---------------------------------------------------------------------------- budget
def test_budget_trims_oldest_gists_then_last_listed_page():
    agent, llm = ingested(lookup_reply="Page [3, 1]")
    full = agent.recall("q", budget_tokens=10_000, rng=None).context
    n = llm.count_tokens(full)
    r = agent.recall("q", budget_tokens=n - 1, rng=None)  # page 0's gist goes first
    assert "<Page 0>" not in r.context and "<Page 2>" in r.context
    assert r.dia_ids[0] == "D1:7"
    raw1, raw3 = (llm.count_tokens(agent._unit(p, True)) for p in (1, 3))
    r = agent.recall("q", budget_tokens=raw1 + raw3 + 1, rng=None)  # only the two raw pages fit
    assert "short gist" not in r.context and "<Page 1>" in r.context and "<Page 3>" in r.context
    r = agent.recall("q", budget_tokens=raw3 + 2, rng=None)  # page 1 was listed last: it goes
    assert "<Page 1>" not in r.context and "<Page 3>" in r.context
    assert llm.count_tokens(r.context) <= raw3 + 2
    assert r.dia_ids == ["D1:19", "D1:20"]
    empty = agent.recall("q", budget_tokens=0, rng=None)
    assert empty.context == "" and empty.dia_ids == []


# ---------------------------------------------------------------------------- cache and reports
def test_state_dict_is_json_and_roundtrips():
    agent, _ = ingested(break_reply="nope", gist_reply="", lookup_reply="Page [1]")
    state = json.loads(json.dumps(agent.state_dict()))
    again = ReadAgent(CountingLLM(scripted(lookup_reply="Page [1]")))
    again.load_state_dict(state)
    assert again.recall("q", budget_tokens=5000, rng=None) == agent.recall("q", budget_tokens=5000, rng=None)
    assert again.stats()["deviations"]["gist_replaced"] == agent.deviations["gist_replaced"]
    assert again.stats()["pages"] == 4
    settings = agent.memory_settings()
    assert settings["word_limit"] == 600 and "max_lookup_pages" not in settings  # recall-only knob
    assert len(agent.export()["pages"]) == 4


@pytest.mark.parametrize("kwargs, arg", [({"word_limit": 0}, "word_limit"),
                                         ({"start_threshold": 700}, "start_threshold"),
                                         ({"max_lookup_pages": 0}, "max_lookup_pages"),
                                         ({"lookup": "random"}, "lookup"),
                                         ({"retrieved_ids": "all"}, "retrieved_ids")])
def test_bad_arguments_name_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        ReadAgent(ScriptedLLM(["x"]), **kwargs)


def test_images_and_session_dates_are_in_the_paragraphs():
    conv = make_conv(n_turns=2, turn_words=3)
    s = conv.sessions[0]
    turn = replace(s.turns[0], caption="a dog on a beach")
    conv = replace(conv, sessions=(replace(s, turns=(turn, s.turns[1])),))
    agent, _ = ingested(conv=conv)
    assert agent.pages == [(0, 3)]  # 17 words < 350: one page, no pagination call
    assert agent.paragraphs[0][0] == "DATE: 1:56 pm on 1 May, 2023"
    assert agent.paragraphs[1][0] == "A: s1t1w0 s1t1w1 s1t1w2 [shares a dog on a beach]"
    assert "pagination_calls" not in agent.counters


# ---------------------------------------------------------------------------- the embedded model
@pytest.mark.slow
def test_end_to_end_on_smollm_first_two_sessions(smollm, minilm, locomo_path):
    conv = load_locomo(locomo_path)[0][0]
    conv = replace(conv, sessions=conv.sessions[:2])
    # Gists capped at 64 tokens (default 192) to keep this test to a few minutes on 2 shared CPU
    # cores; `scgmem-run method=readagent` runs the defaults.
    agent = ReadAgent(smollm, minilm, lookup_fallback="embed", gist_max_new_tokens=64, retrieved_ids="context")
    t0 = time.perf_counter()
    agent.ingest(conv, np.random.default_rng(0))
    ingest_s = time.perf_counter() - t0
    assert agent.pages and agent.pages[-1][1] == len(agent.paragraphs)
    assert all(g.strip() for g in agent.gists)
    questions = [q.question for q in conv.qa[:2]]
    out = agent.recall_batch(questions, budget_tokens=[3000, 3000], rngs=[None, None])
    for r in out:
        assert smollm.count_tokens(r.context) <= 3000 and r.context.startswith("<Page")
        assert r.dia_ids and all(d.startswith(("D1:", "D2:")) for d in r.dia_ids)
    stats = agent.stats()
    json.dumps(agent.state_dict())
    print(f"\nreadagent smollm 2 sessions: ingest {ingest_s:.1f}s, usage {smollm.usage.snapshot()}, stats {stats}")
