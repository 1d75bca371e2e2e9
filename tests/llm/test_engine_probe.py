"""The probe a served SCG-Mem run makes before its first conversation (scgmem/llm/served/probe.py):
each missing engine feature is named with the server flag that fixes it, in one line."""
from __future__ import annotations

import math

import pytest

from scgmem.llm.served.engines.dialect import Continuation, NextTokens, Unsupported
from scgmem.llm.served.http_client import ServerError
from scgmem.llm.served.probe import EngineProbeFailed, probe_engine, probe_server
from scgmem.llm.served.engines.vllm import VLLMDialect

VOCAB = 5000


class FakeTransport:
    """A server that answers the probe's three questions well unless told to fail one."""

    def __init__(self, *, grammar_ok=True, ids_complete=True, next_error=None, scored_shift=0.0, raw_in_reply=False):
        self.grammar_ok, self.ids_complete, self.next_error = grammar_ok, ids_complete, next_error
        self.scored_shift, self.raw_in_reply = scored_shift, raw_in_reply
        self.asked = []

    def continue_(self, prompt_ids, grammar, *, max_tokens, temperature, seed):
        a = prompt_ids[0]
        ids = [a + 1, a, 2] if self.grammar_ok else [7, 7, 7]
        raw = [-0.501 + self.scored_shift, -1.0, -1.0]  # b's value on the next-token route, when raw
        return Continuation(token_ids=ids, raw_logprobs=raw if self.raw_in_reply else None)

    def next_one(self, prompt_ids, allowed, top_n):
        self.asked.append(list(allowed))
        if self.next_error:
            raise self.next_error
        got = {t: -0.5 - 0.001 * i for i, t in enumerate(allowed)}
        if not self.ids_complete:
            got = dict(list(got.items())[:2])
        return NextTokens(logprobs=got, complete=len(got) == len(allowed), floor=min(got.values()))

    def score(self, prompt_ids, continuation):
        return [-0.501 + self.scored_shift]


def test_a_server_with_every_feature_passes_and_is_asked_its_widest_request():
    transport = FakeTransport()
    assert probe_server(transport, VLLMDialect("m"), vocab_size=VOCAB) == []
    assert len(transport.asked[0]) == 128  # the widest next-token request a beam expansion makes


@pytest.mark.parametrize("transport, fix", [
    (FakeTransport(grammar_ok=False), "--structured-outputs-config.backend guidance"),
    (FakeTransport(ids_complete=False), "logprob_token_ids"),
    (FakeTransport(next_error=ServerError("http://x/v1/completions: HTTP 400: too many logprobs")),
     "logprob_token_ids"),
    (FakeTransport(next_error=Unsupported("vllm: the server ignored logprob_token_ids")), "logprob_token_ids"),
    (FakeTransport(scored_shift=-0.7), "--logprobs-mode raw_logprobs"),
])
def test_each_missing_feature_names_its_server_flag(transport, fix):
    problems = probe_server(transport, VLLMDialect("m"), vocab_size=VOCAB)
    assert len(problems) == 1 and fix in problems[0], problems


def test_the_top_n_route_is_asked_at_the_configured_cap():
    transport = FakeTransport(next_error=ServerError("HTTP 400: max_logprobs"))
    dialect = VLLMDialect("m", logprob_token_ids=False, max_logprobs=500)
    problems = probe_server(transport, dialect, vocab_size=VOCAB)
    assert len(problems) == 1 and "--max-logprobs" in problems[0] and "500 listed" in problems[0]


def test_an_engine_whose_replies_carry_raw_logprobs_is_not_asked_to_score():
    transport = FakeTransport(raw_in_reply=True)
    transport.score = None  # never called
    assert probe_server(transport, VLLMDialect("m"), vocab_size=VOCAB) == []


@pytest.mark.parametrize("shift", [0.501, -0.7, math.nan])
def test_log_probs_in_a_continuation_are_checked_raw(shift):
    """0.501 makes the forced token's log-prob 0: the renormalised value a grammar mask gives."""
    problems = probe_server(FakeTransport(raw_in_reply=True, scored_shift=shift), VLLMDialect("m"), vocab_size=VOCAB)
    assert len(problems) == 1 and "not raw" in problems[0], problems


def test_several_problems_are_one_line_naming_the_server(monkeypatch):
    import scgmem.llm.served.probe as probe

    class Pool:
        urls = ["http://127.0.0.1:1/v1"]

    monkeypatch.setattr(probe, "HttpTransport", lambda pool, dialect, affinity: FakeTransport(
        grammar_ok=False, ids_complete=False))
    with pytest.raises(EngineProbeFailed) as e:
        probe_engine(Pool(), VLLMDialect("m"), vocab_size=VOCAB)
    message = str(e.value)
    assert "\n" not in message and "http://127.0.0.1:1/v1" in message
    assert "guidance" in message and "logprob_token_ids" in message


def test_an_unreachable_server_is_not_reported_as_a_missing_feature():
    transport = FakeTransport(next_error=ServerError("http://x/v1/completions: unreachable after 1 tries"))
    with pytest.raises(ServerError, match="unreachable"):
        probe_server(transport, VLLMDialect("m"), vocab_size=VOCAB)


def test_next_one_is_one_request_however_wide_and_next_tokens_asks_chunks_with_it():
    """`HttpTransport.next_one`, the probe's widest single request: every id in one request, in the
    order given; `next_tokens` sorts, chunks at `ids_per_request` and asks each chunk with it."""
    from types import SimpleNamespace

    from scgmem.llm.served.transport import HttpTransport

    class Pool:
        urls = ["http://127.0.0.1:1/v1"]

        def __init__(self):
            self.bodies = []

        def post_from(self, path, body, affinity=0):
            self.bodies.append(body)
            return {"ids": body["ids"]}, self.urls[0]

    dialect = SimpleNamespace(name="fake", max_top_n=None, first_top_n=None, ids_per_request=128,
                              next_body=lambda prompt, allowed, top_n: ("/v1/completions", {"ids": list(allowed)}),
                              read_next=lambda reply, allowed: NextTokens(logprobs={t: -1.0 for t in reply["ids"]},
                                                                          complete=True, floor=-1.0))
    pool = Pool()
    transport = HttpTransport(pool, dialect)
    wide = list(range(300, 0, -1))
    assert sorted(transport.next_one([1], wide, 5).logprobs) == sorted(wide)
    assert [b["ids"] for b in pool.bodies] == [wide]
    pool.bodies.clear()
    assert sorted(transport.next_tokens([1], wide, 5).logprobs) == sorted(wide)
    assert sorted(len(b["ids"]) for b in pool.bodies) == [44, 128, 128]
