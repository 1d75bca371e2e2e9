"""How an answer is read from the model's reply: `answer_format=text|json` (docs/scoring.md).

A-MEM's code asks for its answers as JSON: a system message "You must respond with a JSON
object.", the schema {"answer": string} as LiteLLM `response_format` (Ollama's structured
output), `json.loads(reply)["answer"]` scored, and a reply that does not parse scored as its
raw text and counted (`error_num`). LoCoMo's code scores the reply as text. `json` here stands
in for structured output, which plain generation lacks: the schema is stated in the prompt and
the reply is primed with its opening, '{"answer": "', so the model writes the string's value.
"""
from __future__ import annotations

import json
import re

ANSWER_FORMATS = ("text", "json")
# answer_format=json: A-MEM's system message (memory_layer.py get_completion, verbatim), the
# schema its response_format enforced, stated in words, and the reply primed with the schema's
# opening so that small models without structured output start the object.
JSON_SYSTEM = "You must respond with a JSON object."
JSON_SCHEMA_LINE = '\nRespond with a JSON object of the form {"answer": "<short answer>"}.'
JSON_PREFIX = '{"answer": "'
_STRING_BODY = re.compile(r'((?:[^"\\]|\\.)*)"')  # a JSON string's characters up to its closing quote


_OPEN_ANSWER = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)')  # an own object's answer string, closed or cut
_FENCE = re.compile(r"```[A-Za-z0-9_-]*")  # a Markdown code fence, with or without its language tag
ANSWER_READS = ("primed", "own_object", "fallback")  # how an answer was read: record field "answer_read"


def _decode(text: str):
    """The first JSON value at the start of `text`, or None when there is none. RecursionError is
    caught too: a reply of 5,000 nested '[' is an answer that does not parse, not a crash."""
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except (ValueError, RecursionError):
        return None


def _answer_field(obj) -> str | None:
    """obj["answer"] as a string (non-strings re-serialised), or None when there is none."""
    if not isinstance(obj, dict) or obj.get("answer") is None:
        return None
    if isinstance(obj["answer"], str):
        return obj["answer"]
    try:
        return json.dumps(obj["answer"])
    except RecursionError:  # decoded below the limit, but re-encoding nests one level deeper
        return None


def parse_json_answer(reply: str) -> str | None:
    """The `answer` field of the first JSON object in `reply` (text after it is ignored), or None.

    >>> parse_json_answer('{"answer": "7 May 2023"} and more')
    '7 May 2023'
    """
    start = reply.find("{")
    if start < 0:
        return None
    return _answer_field(_decode(reply[start:]))


def parse_own_object(reply: str) -> str | None:
    r"""The `answer` field of the first JSON object that `reply` writes on its own, or None.

    Instruct models often ignore the primed opening and write the whole object themselves,
    sometimes inside a ```json fence: fences are dropped and each '{' is tried in turn, so
    the first balanced object that parses and has an answer wins.

    >>> parse_own_object('```json\n{"answer": "7 May 2023"}\n```')
    '7 May 2023'
    """
    text = _FENCE.sub("", reply)
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        answer = _answer_field(_decode(text[start:]))
        if answer is not None:
            return answer
    return None


def extract_json_answer(reply: str, prefix: str = JSON_PREFIX) -> tuple[str, dict]:
    """(answer, record fields) of a reply that continues `prefix`.

    Read in this order, and the way recorded as "answer_read":
    - primed: the `answer` field of prefix + reply (the model continued the primed string);
    - own_object: the `answer` field of an object the reply writes itself (fences dropped);
    - fallback: the string after an own `"answer": "` that never closed (cut by the cap), else
      the reply's text up to its closing quote when the prefix opened a string (all of it otherwise).
    "answer_parsed" is False only for the fallback; "reply" keeps the raw text either way.

    >>> extract_json_answer('Paris"}')
    ('Paris', {'reply': 'Paris"}', 'answer_parsed': True, 'answer_read': 'primed'})
    >>> extract_json_answer('{"answer": "7 May 2023"}')[0]
    '7 May 2023'
    >>> extract_json_answer('Paris is the capital of')   # cut by max_new_tokens
    ('Paris is the capital of', {'reply': 'Paris is the capital of', 'answer_parsed': False, 'answer_read': 'fallback'})
    """
    answer = parse_json_answer(prefix + reply)
    if answer is not None:
        return answer.strip(), {"reply": reply, "answer_parsed": True, "answer_read": "primed"}
    answer = parse_own_object(reply)
    if answer is not None:
        return answer.strip(), {"reply": reply, "answer_parsed": True, "answer_read": "own_object"}
    own = _OPEN_ANSWER.search(reply)
    body = _STRING_BODY.match(reply) if prefix.endswith('"') else None
    text = own.group(1) if own else body.group(1) if body else reply
    return (text.strip(),
            {"reply": reply, "answer_parsed": False, "answer_read": "fallback"})


def answer_format_note(answer_format: str) -> str:
    """One line for summary.json saying what the format does."""
    if answer_format == "json":
        return (f"system message {JSON_SYSTEM!r}, schema line {JSON_SCHEMA_LINE.strip()!r}, reply primed with "
                f"{JSON_PREFIX!r}; the answer field is scored; replies that do not parse fall back to their text "
                "(counted in answer_format.unparsed; answer_format.read counts primed, own_object and fallback)")
    return "the reply is scored as generated"


def unparsed_count(records) -> dict | None:
    """{"n", "unparsed", "read"} over records written in json format (None when there are none).

    "read" counts how each answer was read (ANSWER_READS); records written before that field
    existed count as primed when they parsed and as fallback otherwise.
    """
    rows = [r for r in records if "answer_parsed" in r]
    if not rows:
        return None
    read = dict.fromkeys(ANSWER_READS, 0)
    for r in rows:
        read[r.get("answer_read") or ("primed" if r["answer_parsed"] else "fallback")] += 1
    return {"n": len(rows), "unparsed": sum(1 for r in rows if not r["answer_parsed"]), "read": read}
