"""Issue 42, parsers that recurse: replies and files nested 5,000 deep are read (or refused in one
line), never a RecursionError (scgmem/scoring/answer_format.py, judge_prompt.py, harness/untrusted.py)."""
from __future__ import annotations

import pytest

from scgmem.scoring.answer_format import extract_json_answer, parse_json_answer, parse_own_object
from scgmem.scoring.judge_prompt import parse_label

DEEP = [
    "[" * 5000,
    "[" * 5000 + "]" * 5000,
    "{" * 5000,
    '{"answer": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"answer": ' + "[" * 5000,
    '{"a": ' * 5000 + "1" + "}" * 5000,
    '```json\n{"label": ' + "[" * 5000 + "]" * 5000 + "}\n```",
    '{"label": ' + "{" * 5000,
]


@pytest.mark.parametrize("reply", DEEP, ids=range(len(DEEP)))
def test_the_answer_reader_survives_deep_nesting(reply):
    answer, fields = extract_json_answer(reply)
    assert isinstance(answer, str) and fields["answer_read"] in ("primed", "own_object", "fallback")
    parse_json_answer(reply)
    parse_own_object(reply)


@pytest.mark.parametrize("reply", DEEP, ids=range(len(DEEP)))
def test_the_judge_parser_survives_deep_nesting(reply):
    assert parse_label(reply) == ("WRONG", False)


def test_a_deep_answer_under_the_limit_still_reads():
    reply = '{"answer": ' + "[" * 500 + "]" * 500 + "}"
    assert extract_json_answer(reply)[1]["answer_read"] == "own_object"


@pytest.mark.parametrize("text", ["[" * 5000, "[" * 900 + "]" * 900, '{"a": ' * 50 + "1" + "}" * 50])
def test_files_read_back_refuse_deep_nesting_in_one_line(tmp_path, text):
    from scgmem.harness.records import read_jsonl
    from scgmem.harness.untrusted import StoredFileError, parse_json

    with pytest.raises(StoredFileError, match="nested deeper|not valid JSON") as e:
        parse_json(text, "x.json")
    assert "\n" not in str(e.value)
    (tmp_path / "p.jsonl").write_text(text + "\n")
    with pytest.raises(StoredFileError):
        read_jsonl(tmp_path / "p.jsonl")
