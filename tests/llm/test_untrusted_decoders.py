"""Issue 48: a hostile llama.cpp server against the served decoders (greedy key lists and beam
expansions). Each field the decoders read is lied about once; each lie is one `BadServerReply`
line (a ServerError: the runner exits 2) naming the server and the field, never a traceback,
never a key outside the schema, and never an endless loop: every case is bounded by the client's
deadline and the decoder's own request bound (trie keys + 1).

The server listens on 127.0.0.1 in this issue's port range (tests/llm/test_untrusted_served.py).
"""
from __future__ import annotations

import pytest

from scgmem.core.schema import TokenTrie
from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.served.beams import next_logprobs
from scgmem.llm.served.http_client import BadServerReply, ServerError
from scgmem.llm.served.keys import KeyDecoder
from scgmem.llm.served.engines.llamacpp import LlamaCppDialect
from scgmem.llm.served.transport import HttpTransport, ServerPool
from tests.llm.test_untrusted_served import Server

VOCAB, TERMINATOR, END = 64, 9, 1
KEYS = ([10, 11, TERMINATOR], [12, TERMINATOR], [20, 21, 22, TERMINATOR])


def constraint() -> KeyConstraint:
    trie = TokenTrie(vocab_size=VOCAB)
    for key in KEYS:
        trie.insert(key)
    return KeyConstraint(trie, terminator=TERMINATOR, end_id=END)


def entry(tok, lp=-0.5):
    return {"id": tok, "logprob": lp, "top_logprobs": []}


def continuation(*entries, tokens=None):
    reply = {"completion_probabilities": list(entries), "stop_type": "eos"}
    if tokens is not None:
        reply["tokens"] = tokens
    return reply


def top(*pairs):
    return {"completion_probabilities": [{"id": pairs[0][0], "logprob": pairs[0][1],
                                          "top_logprobs": [{"id": t, "logprob": lp} for t, lp in pairs]}]}


def decoder(server) -> KeyDecoder:
    pool = ServerPool([server.url], retries=0, timeout_s=10)
    return KeyDecoder(HttpTransport(pool, LlamaCppDialect("m")), constraint(), where=server.url)


GREEDY_LIES = {
    "an empty continuation (looped forever before issue 48)": (continuation(), "an empty continuation"),
    "a token outside the grammar": (continuation(entry(30)), "token_ids: 30: outside the schema grammar"),
    "a token id outside the vocabulary": (continuation(entry(10**6)), "outside the schema grammar"),
    "a negative token id": (continuation(entry(-3)), "is not a token id"),
    "a string log-prob": (continuation(entry(10, "-0.1")), "expected a number"),
    "a NaN log-prob": (continuation(entry(10, float("nan"))), "not a log-probability"),
    "a positive log-prob": (continuation(entry(10, 3.0)), "not a log-probability"),
    "entries that are lists": ({"completion_probabilities": [[10, -0.1]]}, "expected an object"),
    "completion_probabilities an object": ({"completion_probabilities": {"0": entry(10)}}, "expected a list"),
    "tokens with junk around the ids": (continuation(entry(10), entry(11), entry(TERMINATOR),
                                                     tokens=["x", 10, 11, TERMINATOR]), "disagree"),
    "tokens that disagree": (continuation(entry(10), tokens=[12]), "disagree"),
    "a reply that is a list": ([1, 2], "reply is not a JSON object"),
}


@pytest.mark.parametrize("lie", sorted(GREEDY_LIES))
def test_a_lying_continuation_is_one_line(lie):
    reply, says = GREEDY_LIES[lie]
    sent = []

    def lie_then_stop(body):  # past the decoder's bound the server says stop: a decoder that spins fails here
        sent.append(1)
        return (200, reply, {}) if len(sent) <= len(KEYS) + 1 else (400, {"error": "spinning"}, {})

    with Server(routes={"/completion": lie_then_stop}) as server:
        with pytest.raises(ServerError) as e:  # BadServerReply, or the client's own for a non-object reply
            decoder(server).greedy([5, 6, 7], max_new_tokens=16)
    text = str(e.value)
    assert "\n" not in text and len(text) < 400
    assert server.url.split("/v1")[0] in text and says in text, text
    assert len(server.seen) <= len(KEYS) + 1  # bounded: no reply makes the decoder spin


def test_an_honest_continuation_still_reads():
    replies = iter([continuation(entry(10), entry(11), entry(TERMINATOR)), continuation(entry(12), entry(END))])
    with Server(routes={"/completion": lambda body: (200, next(replies), {})}) as server:
        gen = decoder(server).greedy([5, 6, 7], max_new_tokens=16)
    assert gen.token_ids == [10, 11, TERMINATOR, 12] and not gen.cut


NEXT_LIES = {
    "a token id listed twice": (top((10, -0.1), (10, -0.2), (12, -0.3)), "listed twice"),
    "a reversed two-entry list": (top((12, -2.0), (10, -0.1)), "not a ranked list"),
    "an id outside the vocabulary": (top((10, -0.1), (VOCAB + 5, -0.2)), "outside the vocabulary"),
    "top_logprobs an object": ({"completion_probabilities": [{"id": 1, "logprob": -1, "top_logprobs": {}}]},
                               "expected a list"),
    "logprobs as strings": (top((10, "bad")), "expected a number"),
}


@pytest.mark.parametrize("lie", sorted(NEXT_LIES))
def test_a_lying_top_list_is_one_line(lie):
    reply, says = NEXT_LIES[lie]
    with Server(routes={"/completion": lambda body: (200, reply, {})}) as server:
        with pytest.raises(BadServerReply) as e:
            next_logprobs(decoder(server), [5, 6, 7], allowed=[10, 12, 20], need=3)
    text = str(e.value)
    assert "\n" not in text and says in text and len(text) < 400, text
    assert len(server.seen) == 1


def test_a_top_list_that_never_holds_the_allowed_tokens_ends():
    """A server that answers every widening with the same short list: the widening stops at the
    whole vocabulary instead of asking forever."""
    with Server(routes={"/completion": lambda body: (200, top((30, -0.1)), {})}) as server:
        dec = decoder(server)
        dec.t.max_top_n = None  # an engine without a known cap: only the vocabulary bounds the widening
        with pytest.raises(BadServerReply, match="lack allowed tokens"):
            next_logprobs(dec, [5, 6, 7], allowed=[10, 12, 20], need=3)
    assert len(server.seen) <= 4
