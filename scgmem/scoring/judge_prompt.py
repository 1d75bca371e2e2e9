"""The LLM judge's prompt (pinned, versioned) and the parser of its replies.

The prompt is ours, not a peer's: mem0's and LightMem's ACCURACY_PROMPT asks the judge to be
"generous" (same topic -> CORRECT), which credits partial and vague answers. Ours is lenient on
wording and date formats and strict on facts (docs/scoring.md, "LLM judge (J)"). Any change to
the wording, the rules or the parser is a new `JUDGE_PROMPT_VERSION`: every label records the
version it was made under, and a judgements file of another version is never resumed.

Example::

    messages = judge_messages("When did Caroline go to the LGBTQ support group?",
                              "7 May 2023", "May 7th, 2023")
    label, parsed = parse_label('{"label": "CORRECT"}')   # ("CORRECT", True)
    label, parsed = parse_label("I cannot tell")          # ("WRONG", False): counted as unparsed
    label, parsed = parse_label("The answer is correct")  # ("WRONG", False): not at the verdict position
"""
from __future__ import annotations

import json
import re

# v2: the label is read from the verdict position only (issue 42: a reply quoting a label, or "not
# correct", was read as CORRECT by v1's search of the whole reply); the prompt's text is v1's.
JUDGE_PROMPT_VERSION = "scgmem-judge-v2"
CORRECT, WRONG = "CORRECT", "WRONG"
LABELS = (CORRECT, WRONG)

JUDGE_SYSTEM = "You are a careful grader of answers to questions about a conversation."

JUDGE_TEMPLATE = """Decide whether the predicted answer agrees with the gold answer.

Rules:
- CORRECT when the prediction states the same facts as the gold answer, in any wording. Extra detail is fine as long as it does not contradict the gold answer.
- Dates may be written in any format: "7 May 2023", "May 7th, 2023" and "2023-05-07" are the same date. A date inside the gold answer's period is CORRECT ("12 July 2023" for "July 2023"; "21 May 2023" for "the Sunday before 25 May 2023"). A date less precise than the gold answer ("2023" for "5 July 2023") or a different day, month or year is WRONG.
- WRONG when the prediction names another person, place, object, number or date, contradicts the gold answer, gives only some of the items the gold answer lists, is too vague to answer the question, or says the information is not available while the gold answer gives it.
- Sharing words with the gold answer is not enough: judge the meaning.

Question: {question}
Gold answer: {gold}
Predicted answer: {prediction}

Reply with one word: CORRECT or WRONG."""


def judge_messages(question: str, gold: str, prediction: str) -> list[dict]:
    """The chat messages of one judgement (rendered by the backend's own chat template)."""
    body = JUDGE_TEMPLATE.format(question=" ".join(str(question).split()), gold=" ".join(str(gold).split()),
                                 prediction=" ".join(str(prediction).split()) or "(empty)")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": body}]


# Label words as whole words, any case. "incorrect" must be read as WRONG, not as CORRECT.
_WORD = re.compile(r"(correct|incorrect|wrong)\b", re.IGNORECASE)
_JSON_KEYS = ("label", "judgement", "judgment", "verdict", "answer", "result")
# The verdict position: the start of the reply, after Markdown decoration (**, #, >, a list dash)
# and an optional lead such as "Label:" or "Final verdict is"; the word may sit in bold or brackets.
_LEAD = re.compile(r"[\s*`#>_\-:.()\[\]]*(?:(?:final\s+)?(?:label|judgement|judgment|verdict|answer|grade)"
                   r"\s*(?:is)?\s*[:=\-]?)?[\s*_(\[]*", re.IGNORECASE)
_QUOTES = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u2018": "\u2019"}
_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*|\s*```\s*$")
MAX_REPLY = 4096  # a reply is one word (max_new_tokens 16); a longer one is read from its start only


def _label_of_word(word: str) -> str:
    return CORRECT if word.lower() == "correct" else WRONG


def _object_label(text: str) -> tuple[str, bool] | None:
    """The label of a reply that is a JSON object (optionally in a code fence), or None when it is
    not one. The label-like key's value must be one label word; anything else is unparsed."""
    body = _FENCE.sub("", text).strip()
    if not body.startswith("{"):
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except (ValueError, RecursionError):  # 5,000 nested brackets are not a verdict
        return WRONG, False
    if not isinstance(obj, dict):
        return WRONG, False
    for key in _JSON_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            word = _WORD.fullmatch(value.strip(" .!*\"'"))
            return (_label_of_word(word.group(1)), True) if word else (WRONG, False)
    return WRONG, False


def parse_label(reply: str) -> tuple[str, bool]:
    """(label, parsed) of a judge's reply, read only from the verdict position the prompt defines.

    The prompt asks for one word, CORRECT or WRONG, so the verdict is the reply's first word (after
    Markdown decoration and a lead such as "Label:"), or the label field of a reply that is a JSON
    object. A label anywhere else is text the judge wrote or quoted, never the verdict: a reply
    that starts otherwise ("The prediction is correct", "not correct", a WRONG that goes on to
    quote {"label": "CORRECT"} is WRONG) is unparsed unless its first word is the label. A quoted
    first word counts only when the quote holds the label alone and the reply names no other label
    after it ('"CORRECT"' yes; '"correct" is what it claims, but WRONG' no). Unparsed replies are
    labelled WRONG and counted (parsed=False).
    """
    text = str(reply or "")[:MAX_REPLY]
    as_object = _object_label(text)
    if as_object is not None:
        return as_object
    rest = text[_LEAD.match(text).end():]
    quote = rest[:1] if rest[:1] in _QUOTES else ""
    word = _WORD.match(rest, len(quote))
    if word is None:
        return WRONG, False
    label = _label_of_word(word.group(1))
    if quote:
        after = rest[word.end():]
        if not after.startswith(_QUOTES[quote]) or {_label_of_word(w) for w in _WORD.findall(after)} - {label}:
            return WRONG, False
    return label, True


def prompt_settings() -> dict:
    """What identifies the prompt in summary.json and judge.json."""
    return {"prompt_version": JUDGE_PROMPT_VERSION, "system": JUDGE_SYSTEM, "template": JUDGE_TEMPLATE,
            "label_rule": "the first word (or a JSON reply's label field); nothing else",
            "unparsed_rule": "labelled WRONG and counted (unparsed)"}
