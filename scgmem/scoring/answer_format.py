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


def parse_json_answer(reply: str) -> str | None:
    """The `answer` field of the first JSON object in `reply` (text after it is ignored), or None.

    >>> parse_json_answer('{"answer": "7 May 2023"} and more')
    '7 May 2023'
    """
    start = reply.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(reply[start:])
    except ValueError:
        return None
    if not isinstance(obj, dict) or "answer" not in obj or obj["answer"] is None:
        return None
    return obj["answer"] if isinstance(obj["answer"], str) else json.dumps(obj["answer"])


def extract_json_answer(reply: str, prefix: str = JSON_PREFIX) -> tuple[str, dict]:
    """(answer, record fields) of a reply that continues `prefix`.

    The `answer` field of prefix + reply if it parses; else the fallback: the reply's text up
    to its closing quote when the prefix opened a string (all of it otherwise), and
    "answer_parsed": False. "reply" keeps the raw text either way.

    >>> extract_json_answer('Paris"}')
    ('Paris', {'reply': 'Paris"}', 'answer_parsed': True})
    >>> extract_json_answer('Paris is the capital of')   # cut by max_new_tokens
    ('Paris is the capital of', {'reply': 'Paris is the capital of', 'answer_parsed': False})
    """
    answer = parse_json_answer(prefix + reply)
    if answer is not None:
        return answer.strip(), {"reply": reply, "answer_parsed": True}
    body = _STRING_BODY.match(reply) if prefix.endswith('"') else None
    return (body.group(1) if body else reply).strip(), {"reply": reply, "answer_parsed": False}


def answer_format_note(answer_format: str) -> str:
    """One line for summary.json saying what the format does."""
    if answer_format == "json":
        return (f"system message {JSON_SYSTEM!r}, schema line {JSON_SCHEMA_LINE.strip()!r}, reply primed with "
                f"{JSON_PREFIX!r}; the answer field is scored; replies that do not parse fall back to their text "
                "(counted in answer_format.unparsed)")
    return "the reply is scored as generated"


def unparsed_count(records) -> dict | None:
    """{"n", "unparsed"} over records written in json format (None when there are none)."""
    rows = [r for r in records if "answer_parsed" in r]
    if not rows:
        return None
    return {"n": len(rows), "unparsed": sum(1 for r in rows if not r["answer_parsed"])}
