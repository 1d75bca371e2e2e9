"""A structure-aware property test of the LoCoMo loader: a valid record mutated in every way a
file can be wrong either loads (and what loads meets the contract) or raises the one-line
DataError the runner prints with exit code 2. Never another exception, never a traceback.

Fast suite: FAST_CASES examples; `make test-slow`: SLOW_CASES. The distinct error messages
(file path and values masked) are collected and their number checked, so a run that only ever
reached one error path would fail.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scgmem.api.paths import is_safe_name
from scgmem.data.locomo import DataError, LoCoMoSource, load_locomo, scored_questions

FAST_CASES, SLOW_CASES = 300, 20_000
ODD_STRINGS = st.sampled_from(["", " ", "x" * 20_000, "\x00", "nul\x00byte", "é漢字🙂", "../../evil", "/abs/path",
                               "a/b", ".", "..", "D1:1", "D01:001", "D", "D:1:2", "D1:1; D1:2", "2023-05-08",
                               "8 May, 2023", "1:56 pm on 8 May, 2023", "\u202e", "\ud7ff", "null"])
ODD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 10), st.just(10 ** 30), st.floats(allow_nan=True),
                       ODD_STRINGS, # containers are built afresh for every draw: a mutation must never alter a shared object
                       st.builds(list), st.builds(dict), st.builds(lambda: [[[[[[]]]]]]),
                       st.builds(lambda: {"a": {"b": {"c": 1}}}))


def base_record(locomo_path: Path) -> dict:
    """conv-26 cut to its first two sessions and a handful of questions: small, valid, real."""
    sample = copy.deepcopy(json.loads(locomo_path.read_text())[0])
    conv = sample["conversation"]
    for key in [k for k in conv if re.match(r"session_\d+", k) and int(re.findall(r"\d+", k)[0]) > 2]:
        del conv[key]
    for n in (1, 2):
        conv[f"session_{n}"] = conv[f"session_{n}"][:4]
    sample["qa"] = [q for q in sample["qa"] if q["category"] != 3][:6]
    return {k: sample[k] for k in ("sample_id", "conversation", "qa")}


def _paths(obj, prefix=()):
    """Every (path, value) inside obj, containers included."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _parent(root, path):
    for step in path[:-1]:
        root = root[step]
    return root


@st.composite
def mutated_file(draw, record: dict):
    """A list of samples with one to three mutations drawn from the kinds a file can be wrong in."""
    samples = [copy.deepcopy(record)]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "delete", "extra", "duplicate_sample", "duplicate_dia",
                                     "evidence", "reorder_sessions", "date", "nest", "top"]))
        sample = samples[0]
        places = [p for p, _ in _paths(sample) if p]
        if kind == "replace":
            path = draw(st.sampled_from(places))
            _parent(sample, path)[path[-1]] = draw(ODD_VALUES)
        elif kind == "delete":
            path = draw(st.sampled_from(places))
            parent = _parent(sample, path)
            del parent[path[-1]]
        elif kind == "extra":
            path = draw(st.sampled_from([()] + [p for p in places if isinstance(_parent(sample, p + (0,)), dict)]))
            target = _parent(sample, path + ("x",))
            if isinstance(target, dict):
                target[draw(st.sampled_from(["extra", "session_9", "session_2_date_time", "qa"]))] = draw(ODD_VALUES)
        elif kind == "duplicate_sample":
            samples.append(copy.deepcopy(sample))
        elif kind == "duplicate_dia":
            conv = sample.get("conversation")
            if isinstance(conv, dict) and isinstance(conv.get("session_2"), list) and conv["session_2"]:
                if isinstance(conv["session_2"][0], dict):
                    conv["session_2"][0]["dia_id"] = "D1:1"
        elif kind == "evidence":
            qa = sample.get("qa")
            if isinstance(qa, list) and qa and isinstance(qa[0], dict):
                qa[0]["evidence"] = draw(st.lists(st.one_of(ODD_STRINGS, ODD_VALUES), max_size=3))
        elif kind == "reorder_sessions":
            conv = sample.get("conversation")
            if isinstance(conv, dict):
                sample["conversation"] = dict(reversed(list(conv.items())))
        elif kind == "date":
            conv = sample.get("conversation")
            if isinstance(conv, dict):
                conv["session_1_date_time"] = draw(st.one_of(ODD_STRINGS, st.just("2023-05-08T13:56:00Z"), ODD_VALUES))
        elif kind == "nest":
            path = draw(st.sampled_from(places))
            value = _parent(sample, path)[path[-1]]
            for _ in range(draw(st.integers(1, 50))):
                value = [value]
            _parent(sample, path)[path[-1]] = value
        elif kind == "top":
            return draw(st.sampled_from(["{}", "[]", '"text"', "3", "null", "[null]", "[[]]", '{"sample_id": "x"}']).map(json.loads))
    return samples


def check_loaded(conversations) -> None:
    """What loads meets the contract the rest of the harness relies on."""
    seen = set()
    for conv in conversations:
        assert is_safe_name(conv.sample_id) and conv.sample_id not in seen
        seen.add(conv.sample_id)
        ids = [t.dia_id for t in conv.turns]
        assert len(ids) == len(set(ids))
        for q in conv.qa:
            assert q.category in (1, 2, 3, 4, 5) and isinstance(q.question, str)
            assert q.answer is None or isinstance(q.answer, str)
            assert all(re.fullmatch(r"D\d+:\d+", e) for e in q.evidence)
        scored_questions(conv, {1: "a", 2: "b", 4: "c", 5: "d"}, 2)


def _mask(message: str, path: Path) -> str:
    """The message's shape: the file, quoted values and numbers masked."""
    text = message.replace(str(path), "<file>")
    text = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "<v>", text)
    return re.sub(r"\d+", "<n>", text)


def _run(tmp_path_factory, locomo_path: Path, cases: int) -> set[str]:
    record = base_record(locomo_path)
    path = tmp_path_factory.mktemp("fuzz") / "mutated.json"
    messages: set[str] = set()

    @settings(max_examples=cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(mutated_file(record))
    def case(data):
        path.write_text(json.dumps(data, ensure_ascii=False))
        try:
            conversations, _ = load_locomo(path)
            LoCoMoSource(str(path)).load()
        except DataError as e:
            assert "\n" not in str(e) and str(path) in str(e), str(e)
            messages.add(_mask(str(e), path))
            return
        check_loaded(conversations)

    case()
    return messages


def test_mutated_files_load_or_fail_in_one_line(tmp_path_factory, locomo_path):
    messages = _run(tmp_path_factory, locomo_path, FAST_CASES)
    assert len(messages) >= 15, sorted(messages)  # the mutations reach many error paths, not one


@pytest.mark.slow
def test_mutated_files_load_or_fail_in_one_line_many(tmp_path_factory, locomo_path):
    messages = _run(tmp_path_factory, locomo_path, SLOW_CASES)
    print(f"{len(messages)} distinct error messages over {SLOW_CASES} cases")
    assert len(messages) >= 20, sorted(messages)
