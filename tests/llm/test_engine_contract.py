"""Every registered serving engine against one contract (scgmem/llm/served/engines/__init__.py).

The engines are read off the registry, never listed here, and tests/llm/engines/ (a fixture
engine written as the one file docs/architecture.md asks for) is put beside the package's
folder, so the contract runs on it too and `model.engine=echo` finds it. The contract:

* the name is the file's, the route is named, the top-list caps are sane;
* a caller's bad argument is a ValueError naming it, for every question, before any body;
* each question gives (path, JSON body) or raises Unsupported naming the engine;
* any JSON reply is read into the documented result or refused with BadReply/Unsupported,
  never another exception (hypothesis-generated replies).
"""
from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scgmem.llm.served.engines as package
from scgmem.llm.served import engines
from scgmem.llm.served.engines.dialect import BadReply, Continuation, NextTokens, Unsupported

FIXTURES = Path(__file__).parent / "engines"


@contextmanager
def fixture_engines():
    """The package's folder plus tests/llm/engines/, as if its files were added to the package."""
    saved = list(package.__path__)
    package.__path__.append(str(FIXTURES))
    try:
        yield
    finally:
        package.__path__[:] = saved


with fixture_engines():
    ENGINES = engines.names()


@pytest.fixture(autouse=True)
def _fixture_engines():
    with fixture_engines():
        yield


def test_the_registry_finds_the_engines_and_a_one_file_addition():
    assert {"llamacpp", "sglang", "vllm"} <= set(ENGINES) and "echo" in ENGINES
    assert engines.make_dialect("echo", "m").name == "echo"
    assert "echo" in engines.one_of().split("|")


def test_an_unknown_engine_is_refused_with_the_registered_names():
    with pytest.raises(ValueError, match=r"model.engine must be one of \[.*'echo'.*'vllm'.*\], got 'tgi'"):
        engines.make_dialect("tgi", "m")
    with pytest.raises(ValueError, match="model.engine_options: .*unexpected keyword"):
        engines.make_dialect("echo", "m", {"beams": 3})


def test_a_dialect_must_carry_its_files_name():
    from scgmem.llm.served.engines.dialect import EngineDialect

    class Elsewhere(EngineDialect):
        name = "elsewhere"

    with pytest.raises(TypeError, match="must be the file's name"):
        engines.register_engine(Elsewhere)


@pytest.mark.parametrize("engine", ENGINES)
def test_name_route_and_caps(engine):
    dialect = engines.make_dialect(engine, "m")
    assert dialect.name == engine and dialect.model_id == "m"
    assert isinstance(dialect.route, str) and dialect.route and dialect.route != "none"
    for cap in (dialect.max_top_n, dialect.first_top_n):
        assert cap is None or (isinstance(cap, int) and cap >= 1)
    if dialect.max_top_n and dialect.first_top_n:
        assert dialect.first_top_n <= dialect.max_top_n


def questions(dialect, prompt=(1, 5), allowed=(8, 9), continuation=(8, 2), top_n=4, max_tokens=4,
              grammar="start: <[8]>"):
    return {"continue": lambda: dialect.continue_body(list(prompt), grammar, max_tokens=max_tokens, temperature=0.0,
                                                      seed=0),
            "next": lambda: dialect.next_body(list(prompt), list(allowed), top_n),
            "score": lambda: dialect.score_body(list(prompt), list(continuation))}


BAD = [  # (question, keyword, value, the name the message carries)
    ("continue", "prompt", (1, -2), "prompt_ids"), ("continue", "prompt", (1, True), "prompt_ids"),
    ("continue", "max_tokens", 0, "max_tokens"), ("continue", "grammar", "", "grammar"),
    ("next", "prompt", ("a",), "prompt_ids"), ("next", "allowed", (), "allowed"), ("next", "top_n", 0, "top_n"),
    ("score", "continuation", (), "continuation"), ("score", "prompt", (), "prompt"),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("question, keyword, value, named", BAD)
def test_a_bad_caller_argument_is_a_value_error_naming_it(engine, question, keyword, value, named):
    ask = questions(engines.make_dialect(engine, "m"), **{keyword: value})[question]
    with pytest.raises(ValueError, match=named) as caught:
        ask()
    assert caught.type is ValueError  # the caller's error, whatever the engine supports


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("question", ["continue", "next", "score"])
def test_each_question_is_a_json_body_or_unsupported(engine, question):
    dialect = engines.make_dialect(engine, "m")
    try:
        path, body = questions(dialect)[question]()
    except Unsupported as e:
        assert str(e).startswith(f"{engine}:") and "\n" not in str(e)
        return
    assert isinstance(path, str) and path.startswith("/")
    assert json.loads(json.dumps(body)) == body and "1, 5" in json.dumps(body)  # the prompt as token ids


# the field names the engines' replies use, so that generated replies reach past the first check
KEYS = ["choices", "logprobs", "top_logprobs", "tokens", "token_ids", "finish_reason", "prompt_logprobs",
        "prompt_token_ids", "logprob", "meta_info", "type", "output_ids", "output_token_logprobs",
        "output_token_ids_logprobs", "input_token_logprobs", "completion_probabilities", "id", "stop_type", "ids",
        "finish", "8", "9", "2", "token_id:8", "token_id:9"]
SCALARS = (st.none() | st.booleans() | st.integers(-3, 70000) | st.floats(allow_nan=True)
           | st.sampled_from(["stop", "length", "limit", "token_id:8", "token_id:x", "8"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5), max_leaves=25)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=JSON)
def test_any_reply_is_read_or_refused_with_bad_reply(engine, reply):
    dialect = engines.make_dialect(engine, "m")
    reads = {"continue": lambda: dialect.read_continue(reply), "next": lambda: dialect.read_next(reply, [8, 9]),
             "score": lambda: dialect.read_score(reply, 2, [8, 2])}
    for question, read in reads.items():
        try:
            got = read()
        except (BadReply, Unsupported):
            continue
        if question == "continue":
            assert isinstance(got, Continuation) and got.finish in ("stop", "length")
            assert all(isinstance(t, int) and t >= 0 for t in got.token_ids)
            assert got.raw_logprobs is None or len(got.raw_logprobs) == len(got.token_ids)
        elif question == "next":
            assert isinstance(got, NextTokens) and set(got.logprobs) <= {8, 9}
            assert not got.complete or set(got.logprobs) == {8, 9}
            assert all(lp <= 1e-4 and not math.isnan(lp) for lp in got.logprobs.values())
        else:
            assert len(got) == 2 and all(isinstance(lp, float) and lp <= 1e-4 for lp in got)


def test_model_engine_picks_up_the_one_file_engine():
    """`model=openai_compatible model.engine=echo`: the backend builds the fixture's dialect and
    records its route, with no other file edited."""
    from scgmem.llm.loading import resolve_model_dir
    from scgmem.llm.loading import EMBEDDED
    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM
    from tests.llm.servers import ScriptedServer

    with ScriptedServer(lambda body: (200, {})) as server:
        llm = OpenAICompatibleLLM(server.url, server.model, tokenizer=resolve_model_dir(None, **EMBEDDED),
                                  engine="echo")
        report = llm.generation_report()["server"]
    assert llm.applies_constraints and report["engine"] == "echo"
    assert report["raw_logprobs_route"] == engines.make_dialect("echo", "m").route
