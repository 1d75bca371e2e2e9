"""The vLLM and SGLang dialects against their documented request and reply shapes.

Neither engine runs on this machine (no GPU), so each reply fixture below is a JSON literal
written in the shape the engine's documentation and sources give (cited next to it), and the
tests check the exact request bodies, the parsing of those replies, and that every malformed
reply raises BadReply (or Unsupported, for a missing engine feature) naming the field.
"""
from __future__ import annotations

import copy
import json
import math

import pytest

from scgmem.llm.served.engines.dialect import BadReply, Unsupported
from scgmem.llm.served.engines.sglang import SGLangDialect
from scgmem.llm.served.engines.vllm import VLLMDialect

GRAMMAR = '%llguidance {}\nstart: key\nkey: <[8363]> <[2]> | <[9]> <[2]>\n'
NEUTRAL = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
           "presence_penalty": 0.0, "frequency_penalty": 0.0}


def as_json(reply):
    """What the client's JSON decoder hands a dialect."""
    return json.loads(json.dumps(reply))


def broken(reply, path, value):
    """A copy of `reply` with the field at `path` set to `value` (or deleted when value is DEL)."""
    out = copy.deepcopy(reply)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is DEL:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


DEL = object()

# ---------------------------------------------------------------------------------------------
# vLLM. Shapes: vllm/entrypoints/openai/completion/protocol.py (CompletionResponse,
# CompletionResponseChoice with token_ids / prompt_token_ids / prompt_logprobs, CompletionLogProbs)
# and completion/serving.py `_create_completion_logprobs` ("token_id:N" keys with
# return_tokens_as_token_ids, -inf written as -9999.0), vLLM main as of the v0.2x docs.
# ---------------------------------------------------------------------------------------------

# A grammar-constrained continuation: /v1/completions, logprobs=0, return_token_ids.
VLLM_CONTINUE = {
    "id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
    "choices": [{
        "index": 0, "text": " Bob", "finish_reason": "stop", "stop_reason": None,
        "logprobs": {"text_offset": [0, 4], "token_logprobs": [-0.02, -0.01],
                     "tokens": ["token_id:8363", "token_id:2"],
                     "top_logprobs": [{"token_id:8363": -0.02}, {"token_id:2": -0.01}]},
        "token_ids": [8363, 2], "prompt_token_ids": [1, 5, 7], "prompt_logprobs": None,
    }],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}

# A beam expansion: max_tokens=1, logprobs=3, return_tokens_as_token_ids.
VLLM_NEXT = {
    "id": "cmpl-2", "object": "text_completion", "created": 1, "model": "m",
    "choices": [{
        "index": 0, "text": " Bob", "finish_reason": "length", "stop_reason": None,
        "logprobs": {"text_offset": [0], "token_logprobs": [-0.5], "tokens": ["token_id:8363"],
                     "top_logprobs": [{"token_id:8363": -0.5, "token_id:9": -1.25, "token_id:40": -3.0}]},
    }],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}

# Scoring: prompt [1, 5] + continuation [8363, 2], prompt_logprobs=0. Entry 0 is None
# (vllm/v1/engine/logprobs.py: "logprob of first prompt token is None"); the others are
# {token id (a JSON string key): Logprob(logprob, rank, decoded_token)}.
VLLM_SCORE = {
    "id": "cmpl-3", "object": "text_completion", "created": 1, "model": "m",
    "choices": [{
        "index": 0, "text": "\n", "finish_reason": "length", "stop_reason": None, "logprobs": None,
        "token_ids": [198], "prompt_token_ids": [1, 5, 8363, 2],
        "prompt_logprobs": [None,
                            {"5": {"logprob": -7.5, "rank": 120, "decoded_token": "x"}},
                            {"8363": {"logprob": -1.5, "rank": 2, "decoded_token": " Bob"}},
                            {"2": {"logprob": -0.25, "rank": 1, "decoded_token": "</s>"}}],
    }],
    "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5},
}


def test_vllm_continue_body_sends_the_grammar_as_structured_outputs():
    path, body = VLLMDialect("m").continue_body([1, 5, 7], GRAMMAR, max_tokens=8, temperature=0.0, seed=3)
    assert path == "/v1/completions"
    assert body == {"model": "m", "prompt": [1, 5, 7], "max_tokens": 8, "temperature": 0.0, "n": 1, **NEUTRAL,
                    "skip_special_tokens": False, "seed": 3, "logprobs": 0,
                    "return_tokens_as_token_ids": True, "return_token_ids": True,
                    "structured_outputs": {"grammar": GRAMMAR}}


def test_vllm_legacy_guided_sends_guided_grammar():
    _, body = VLLMDialect("m", legacy_guided=True).continue_body([1], GRAMMAR, max_tokens=4, temperature=0.7,
                                                                 seed=11)
    assert body["guided_grammar"] == GRAMMAR and "structured_outputs" not in body
    assert body["temperature"] == 0.7 and body["seed"] == 11


def test_vllm_read_continue_reads_ids_and_never_logprobs():
    out = VLLMDialect("m").read_continue(as_json(VLLM_CONTINUE))
    assert out.token_ids == [8363, 2] and out.finish == "stop"
    assert out.raw_logprobs is None  # grammar-masked, renormalised: never recorded as raw


def test_vllm_read_continue_falls_back_to_token_id_strings():
    # a server that predates return_token_ids leaves token_ids out
    out = VLLMDialect("m").read_continue(as_json(broken(VLLM_CONTINUE, ["choices", 0, "token_ids"], DEL)))
    assert out.token_ids == [8363, 2]


@pytest.mark.parametrize("path, value, field", [
    (["choices"], [], "choices"),
    (["choices"], "x", "choices"),
    (["choices", 0, "finish_reason"], "abort", "finish_reason"),
    (["choices", 0, "finish_reason"], None, "finish_reason"),
    (["choices", 0, "token_ids"], [8363, -1], "token_ids[1]"),
    (["choices", 0, "token_ids"], [8363, True], "token_ids[1]"),
    (["choices", 0, "token_ids"], [8363, 3], "disagree"),
    (["choices", 0, "logprobs", "tokens"], [" Bob", "token_id:2"], "tokens[0]"),
    (["choices", 0, "logprobs", "tokens"], "token_id:8363", "logprobs.tokens"),
])
def test_vllm_read_continue_refuses_malformed_replies(path, value, field):
    with pytest.raises(BadReply, match=field.replace("[", r"\[").replace("]", r"\]")):
        VLLMDialect("m").read_continue(as_json(broken(VLLM_CONTINUE, path, value)))


def test_vllm_read_continue_refuses_a_reply_without_ids():
    reply = broken(broken(VLLM_CONTINUE, ["choices", 0, "token_ids"], DEL), ["choices", 0, "logprobs"], None)
    with pytest.raises(BadReply, match=r"neither choices\[0\].token_ids nor choices\[0\].logprobs.tokens"):
        VLLMDialect("m").read_continue(reply)
    with pytest.raises(BadReply, match="expected an object"):
        VLLMDialect("m").read_continue([VLLM_CONTINUE])


def test_vllm_next_body_asks_top_n_capped_at_max_logprobs():
    path, body = VLLMDialect("m", logprob_token_ids=False).next_body([1, 5], [9, 8363], top_n=50)
    assert path == "/v1/completions"
    assert body == {"model": "m", "prompt": [1, 5], "max_tokens": 1, "temperature": 0.0, "n": 1, **NEUTRAL,
                    "skip_special_tokens": False, "return_tokens_as_token_ids": True, "logprobs": 20}


def test_vllm_next_body_names_the_allowed_ids_by_default():
    dialect = VLLMDialect("m")
    assert dialect.ids_per_request == 128 and VLLMDialect("m", logprob_token_ids=False).ids_per_request is None
    _, body = dialect.next_body([1, 5], [9, 8363, 9], top_n=2)
    assert body["logprob_token_ids"] == [9, 8363] and body["logprobs"] == 1  # `logprobs` must be set
    assert "logprob_token_ids" in dialect.route
    # more than vLLM's 128 ids in one request: the top-n list (the transport chunks before it gets here)
    _, wide = dialect.next_body([1], list(range(200)), top_n=5)
    assert "logprob_token_ids" not in wide and wide["logprobs"] == 5


def test_vllm_read_next_returns_a_top_n_list_as_incomplete_with_its_floor():
    got = VLLMDialect("m", logprob_token_ids=False).read_next(as_json(VLLM_NEXT), allowed=[9, 8363, 77])
    assert got.logprobs == {8363: -0.5, 9: -1.25}
    assert not got.complete and got.floor == -3.0
    full = VLLMDialect("m", logprob_token_ids=False).read_next(as_json(VLLM_NEXT), allowed=[9, 8363])
    assert full.complete


def test_vllm_read_next_reads_minus_9999_as_minus_inf():
    reply = broken(VLLM_NEXT, ["choices", 0, "logprobs", "top_logprobs"], [{"token_id:8363": 0.0, "token_id:9": -9999.0}])
    got = VLLMDialect("m").read_next(as_json(reply), allowed=[9, 8363])
    assert got.logprobs[9] == -math.inf and got.floor == -math.inf


def test_vllm_read_next_refuses_when_logprob_token_ids_was_ignored():
    # an older server drops the unknown field and lists only the top-1 + sampled token
    with pytest.raises(Unsupported, match="logprob_token_ids"):
        VLLMDialect("m", logprob_token_ids=True).read_next(as_json(VLLM_NEXT), allowed=[9, 8363, 77])


@pytest.mark.parametrize("top, field", [
    ([], "top_logprobs must hold one"),
    ([{}], "top_logprobs must hold one"),
    ([{"token_id:1": -1.0}, {"token_id:2": -1.0}], "top_logprobs must hold one"),
    ([{" Bob": -0.5}], "is not 'token_id:N'"),
    ([{"token_id:x": -0.5}], "is not 'token_id:N'"),
    ([{"token_id:8363": 0.5}], "not a log-probability"),
    ([{"token_id:8363": None}], "expected a number"),
    ([{"token_id:8363": "-0.5"}], "expected a number"),
])
def test_vllm_read_next_refuses_malformed_top_logprobs(top, field):
    with pytest.raises(BadReply, match=field):
        VLLMDialect("m").read_next(broken(VLLM_NEXT, ["choices", 0, "logprobs", "top_logprobs"], top), [8363])


def test_vllm_read_next_refuses_a_reply_without_logprobs():
    with pytest.raises(BadReply, match="logprobs is missing"):
        VLLMDialect("m").read_next(broken(VLLM_NEXT, ["choices", 0, "logprobs"], None), [8363])


def test_vllm_score_body_asks_prompt_logprobs_of_prompt_plus_continuation():
    path, body = VLLMDialect("m").score_body([1, 5], [8363, 2])
    assert path == "/v1/completions"
    assert body == {"model": "m", "prompt": [1, 5, 8363, 2], "max_tokens": 1, "temperature": 0.0, "n": 1,
                    **NEUTRAL, "skip_special_tokens": False, "prompt_logprobs": 0, "return_token_ids": True}
    with pytest.raises(ValueError, match="non-empty prompt"):
        VLLMDialect("m").score_body([], [2])


def test_vllm_read_score_reads_the_continuation_entries():
    assert VLLMDialect("m").read_score(as_json(VLLM_SCORE), 2, [8363, 2]) == [-1.5, -0.25]


@pytest.mark.parametrize("path, value, field", [
    (["choices", 0, "prompt_logprobs"], None, "prompt_logprobs is NoneType"),
    (["choices", 0, "prompt_logprobs"], DEL, "prompt_logprobs is missing"),
    (["choices", 0, "prompt_logprobs", 3], DEL, "has 3 entries, expected 4"),
    (["choices", 0, "prompt_logprobs", 3], None, r"prompt_logprobs\[3\]: no entry for token 2"),
    (["choices", 0, "prompt_logprobs", 3], {"7": {"logprob": -1.0}}, r"prompt_logprobs\[3\]: no entry"),
    (["choices", 0, "prompt_logprobs", 2, "8363"], {"rank": 2}, r"prompt_logprobs\[2\].logprob is missing"),
    (["choices", 0, "prompt_logprobs", 2, "8363", "logprob"], "x", "expected a number"),
    (["choices", 0, "prompt_logprobs", 2, "8363", "logprob"], 3.0, "not a log-probability"),
    (["choices", 0, "prompt_token_ids"], [1, 5, 8363, 3], "do not end with the scored continuation"),
])
def test_vllm_read_score_refuses_malformed_prompt_logprobs(path, value, field):
    with pytest.raises(BadReply, match=field):
        VLLMDialect("m").read_score(as_json(broken(VLLM_SCORE, path, value)), 2, [8363, 2])


def test_vllm_refuses_bad_arguments_from_the_caller():
    with pytest.raises(ValueError, match="max_logprobs"):
        VLLMDialect("m", max_logprobs=0)
    with pytest.raises(ValueError, match="not a token id"):
        VLLMDialect("m").next_body([1, -2], [3], 1)
    with pytest.raises(ValueError, match="at least one"):
        VLLMDialect("m").next_body([1], [], 1)


# ---------------------------------------------------------------------------------------------
# SGLang. Shapes: docs/basic_usage/sampling_params.md (/generate arguments) and
# srt/managers/tokenizer_manager.py: the reply {"text", "output_ids", "meta_info"}, each log-prob
# entry [logprob, token_id, text-or-null] (`detokenize_logprob_tokens`, return_text_in_logprobs
# off), meta_info.finish_reason {"type": "stop"|"length"|"abort", "matched": ...}, and
# input_token_logprobs aligned with input_ids[logprob_start_len:], entry 0 always null
# (scheduler `_process_input_token_logprobs`).
# ---------------------------------------------------------------------------------------------

SGLANG_CONTINUE = {
    "text": " Bob", "output_ids": [8363, 2],
    "meta_info": {"id": "a1", "finish_reason": {"type": "stop", "matched": 2},
                  "prompt_tokens": 3, "completion_tokens": 2, "cached_tokens": 0,
                  "input_token_logprobs": [[None, 7, None]],
                  "output_token_logprobs": [[-0.02, 8363, None], [-0.01, 2, None]], "e2e_latency": 0.1},
}

# token_ids_logprob=[9, 8363, 77], max_new_tokens=1
SGLANG_NEXT = {
    "text": " Bob", "output_ids": [8363],
    "meta_info": {"id": "a2", "finish_reason": {"type": "length", "length": 1},
                  "prompt_tokens": 2, "completion_tokens": 1, "cached_tokens": 2,
                  "input_token_logprobs": [[None, 5, None]], "output_token_logprobs": [[-0.5, 8363, None]],
                  "input_token_ids_logprobs": [None],
                  "output_token_ids_logprobs": [[[-1.25, 9, None], [-0.5, 8363, None], [-11.0, 77, None]]]},
}

# prompt [1, 5] + continuation [8363, 2], logprob_start_len = 1
SGLANG_SCORE = {
    "text": "\n", "output_ids": [198],
    "meta_info": {"id": "a3", "finish_reason": {"type": "length", "length": 1},
                  "prompt_tokens": 4, "completion_tokens": 1, "cached_tokens": 1,
                  "input_token_logprobs": [[None, 5, None], [-1.5, 8363, None], [-0.25, 2, None]],
                  "output_token_logprobs": [[-0.7, 198, None]]},
}


def test_sglang_continue_body_sends_the_grammar_as_ebnf():
    path, body = SGLangDialect("m").continue_body([1, 5, 7], GRAMMAR, max_tokens=8, temperature=0.0, seed=3)
    assert path == "/generate"
    assert body == {"input_ids": [1, 5, 7],
                    "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "n": 1, **NEUTRAL,
                                        "skip_special_tokens": False, "ebnf": GRAMMAR},
                    "return_logprob": True, "logprob_start_len": -1, "stream": False}
    _, sampled = SGLangDialect("m").continue_body([1], GRAMMAR, max_tokens=2, temperature=0.7, seed=3)
    assert sampled["sampling_params"]["sampling_seed"] == 3  # only a sampled request is seeded


def test_sglang_read_continue_reads_ids_and_never_logprobs():
    out = SGLangDialect("m").read_continue(as_json(SGLANG_CONTINUE))
    assert out.token_ids == [8363, 2] and out.finish == "stop" and out.raw_logprobs is None
    older = broken(SGLANG_CONTINUE, ["output_ids"], DEL)  # a server without output_ids
    assert SGLangDialect("m").read_continue(as_json(older)).token_ids == [8363, 2]


@pytest.mark.parametrize("path, value, field", [
    (["meta_info"], DEL, "meta_info is missing"),
    (["meta_info"], [], "meta_info is list"),
    (["meta_info", "finish_reason"], {"type": "abort", "message": "x"}, "finish_reason"),
    (["meta_info", "finish_reason"], None, "finish_reason"),
    (["meta_info", "finish_reason"], "stop", "finish_reason"),
    (["output_ids"], [8363, 3], "disagree"),
    (["output_ids"], [8363, -3], r"output_ids\[1\]"),
    (["output_ids"], "8363", "output_ids is str"),
    (["meta_info", "output_token_logprobs", 1], [-0.01, 2], r"output_token_logprobs\[1\]"),
    (["meta_info", "output_token_logprobs", 1], [-0.01, "2", None], r"output_token_logprobs\[1\]\[1\]"),
    (["meta_info", "output_token_logprobs", 1], [-0.01, 2, 5], r"output_token_logprobs\[1\]\[2\]"),
])
def test_sglang_read_continue_refuses_malformed_replies(path, value, field):
    with pytest.raises(BadReply, match=field):
        SGLangDialect("m").read_continue(as_json(broken(SGLANG_CONTINUE, path, value)))


def test_sglang_next_body_names_the_allowed_ids():
    path, body = SGLangDialect("m").next_body([1, 5], [77, 9, 8363, 9], top_n=2)
    assert path == "/generate"
    assert body == {"input_ids": [1, 5],
                    "sampling_params": {"max_new_tokens": 1, "temperature": 0.0, "n": 1, **NEUTRAL,
                                        "skip_special_tokens": False},
                    "return_logprob": True, "logprob_start_len": -1, "token_ids_logprob": [9, 77, 8363],
                    "stream": False}


def test_sglang_read_next_is_complete():
    got = SGLangDialect("m").read_next(as_json(SGLANG_NEXT), allowed=[9, 8363, 77])
    assert got.logprobs == {9: -1.25, 8363: -0.5, 77: -11.0} and got.complete and got.floor == -11.0


@pytest.mark.parametrize("path, value, error, field", [
    (["meta_info", "output_token_ids_logprobs"], DEL, Unsupported, "token_ids_logprob"),
    (["meta_info", "output_token_ids_logprobs"], [], BadReply, "0 positions"),
    (["meta_info", "output_token_ids_logprobs", 0, 2], [-11.0, 78, None], BadReply, r"lacks requested ids \[77\]"),
    (["meta_info", "output_token_ids_logprobs", 0, 2], [None, 77, None], BadReply, "expected a number"),
    (["meta_info", "output_token_ids_logprobs", 0, 2], [float("nan"), 77, None], BadReply, "not a log-probability"),
    (["meta_info", "output_token_ids_logprobs", 0], {"9": -1.25}, BadReply, "is dict"),
])
def test_sglang_read_next_refuses_malformed_replies(path, value, error, field):
    with pytest.raises(error, match=field):
        SGLangDialect("m").read_next(broken(SGLANG_NEXT, path, value), allowed=[9, 8363, 77])


def test_sglang_score_body_starts_one_token_before_the_continuation():
    path, body = SGLangDialect("m").score_body([1, 5], [8363, 2])
    assert path == "/generate"
    assert body == {"input_ids": [1, 5, 8363, 2],
                    "sampling_params": {"max_new_tokens": 1, "temperature": 0.0, "n": 1, **NEUTRAL,
                                        "skip_special_tokens": False},
                    "return_logprob": True, "logprob_start_len": 1, "stream": False}
    with pytest.raises(ValueError, match="non-empty prompt"):
        SGLangDialect("m").score_body([1], [])


def test_sglang_read_score_reads_the_continuation_entries():
    assert SGLangDialect("m").read_score(as_json(SGLANG_SCORE), 2, [8363, 2]) == [-1.5, -0.25]


@pytest.mark.parametrize("path, value, field", [
    (["meta_info", "input_token_logprobs"], DEL, "input_token_logprobs is missing"),
    (["meta_info", "input_token_logprobs", 2], DEL, "has 2 entries, expected 3"),
    (["meta_info", "input_token_logprobs", 1], [-1.5, 8364, None], r"\[1\] is token 8364, expected 8363"),
    (["meta_info", "input_token_logprobs", 1], [None, 8363, None], r"input_token_logprobs\[1\]\[0\]: expected a number"),
    (["meta_info", "input_token_logprobs", 2], [0.5, 2, None], "not a log-probability"),
])
def test_sglang_read_score_refuses_malformed_replies(path, value, field):
    with pytest.raises(BadReply, match=field):
        SGLangDialect("m").read_score(as_json(broken(SGLANG_SCORE, path, value)), 2, [8363, 2])


# ---------------------------------------------------------------------------------------------
# Both engines hand a grammar to llguidance.grammar_from ("grammar" in vLLM's guidance backend,
# "ebnf" in SGLang's llguidance backend); a token-id Lark grammar must come through as Lark.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["grammar", "ebnf"])
def test_llguidance_keeps_a_token_id_lark_grammar_as_lark(kind):
    llguidance = pytest.importorskip("llguidance")
    assert llguidance.grammar_from(kind, GRAMMAR) == GRAMMAR


def test_routes_name_where_raw_logprobs_come_from():
    assert "prompt_logprobs" in VLLMDialect("m").route and "chunks of at most 128" in VLLMDialect("m").route
    assert "top-n" in VLLMDialect("m", logprob_token_ids=False).route
    assert VLLMDialect("m").max_top_n == 20 and VLLMDialect("m", max_logprobs=5).max_top_n == 5
    assert "input_token_logprobs" in SGLangDialect("m").route and SGLangDialect("m").max_top_n is None
    assert (VLLMDialect("m").name, SGLangDialect("m").name) == ("vllm", "sglang")
