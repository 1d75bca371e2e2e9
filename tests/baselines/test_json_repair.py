"""clean_json: MemGPT's repair strategies, in order, and None when all fail."""
from __future__ import annotations

import pytest

from scgmem.baselines.json_repair import clean_json, clean_json_with_strategy, first_balanced_object, strip_code_fences


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": [1, 2]}',
    '```json\n{"a": 1, "b": [1, 2]}\n```',
    '```\n{"a": 1, "b": [1, 2]}\n```',
    '  {"a": 1, "b": [1, 2]}  \n',
])
def test_direct_parse_after_stripping_fences(text):
    assert clean_json_with_strategy(text) == ({"a": 1, "b": [1, 2]}, "direct")


@pytest.mark.parametrize("text,expected", [
    ('{"a": 1', {"a": 1}),                                                      # + }
    ('{"function": "f", "params": {"x": 1}', {"function": "f", "params": {"x": 1}}),  # + }}
    ('{"function": "f", "params": {"message": "hi', {"function": "f", "params": {"message": "hi"}}),  # + "}}
    ('{"a": 1, "b": 2,', {"a": 1, "b": 2}),                                    # trailing comma, + }
    ('{"f": "g", "params": {"x": 1},\n', {"f": "g", "params": {"x": 1}}),     # trailing comma and newline
])
def test_completion_of_cut_generations(text, expected):
    assert clean_json_with_strategy(text) == (expected, "completed")


@pytest.mark.parametrize("text,expected", [
    ('Sure! Here it is: {"a": 1} Hope that helps.', {"a": 1}),
    ('{"a": 1}{"b": 2}', {"a": 1}),                                   # two objects back to back
    ('note {"s": "a } inside { a string", "n": {"m": 2}} tail', {"s": "a } inside { a string", "n": {"m": 2}}),
    ('{not json} then {"ok": true}', {"ok": True}),                  # first balanced one that parses
])
def test_first_balanced_object(text, expected):
    assert clean_json_with_strategy(text) == (expected, "balanced")


@pytest.mark.parametrize("text", [None, "", "   ", "no json at all", "[1, 2, 3]", "42", '"a string"',
                                  '{"a": [1, 2', "{{{{", "}{"])
def test_none_when_every_strategy_fails(text):
    assert clean_json(text) is None
    assert clean_json_with_strategy(text) == (None, None)


def test_only_objects_count():
    # A parsable non-object is not an answer; the balanced strategy may still find an object inside.
    assert clean_json('[{"a": 1}]') == {"a": 1}
    assert first_balanced_object("[1, 2]") is None


def test_strip_code_fences_leaves_plain_text():
    assert strip_code_fences("```json\nX\n```") == "X"
    assert strip_code_fences("plain") == "plain"
