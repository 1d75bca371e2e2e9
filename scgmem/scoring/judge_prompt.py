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
"""
from __future__ import annotations

import json
import re

JUDGE_PROMPT_VERSION = "scgmem-judge-v1"
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
_WORD = re.compile(r"\b(correct|incorrect|wrong)\b", re.IGNORECASE)
_JSON_KEYS = ("label", "judgement", "judgment", "verdict", "answer", "result")


def _label_of_word(word: str) -> str:
    return CORRECT if word.lower() == "correct" else WRONG


def _json_label(reply: str) -> str | None:
    """The label of the first JSON object in `reply` that has a label-like key, or None."""
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", reply)):
        try:
            obj, _ = decoder.raw_decode(reply[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            for key in _JSON_KEYS:
                value = obj.get(key)
                words = _WORD.findall(value) if isinstance(value, str) else []
                if len({_label_of_word(w) for w in words}) == 1:
                    return _label_of_word(words[0])
    return None


def parse_label(reply: str) -> tuple[str, bool]:
    """(label, parsed) of a judge's reply.

    Read in order: a JSON object with a label-like key ({"label": "CORRECT"}); the reply's first
    word once quotes, asterisks and a "label:"-style lead are dropped ("**Correct.**", "Answer:
    WRONG because ..."); else the one label the reply names, if it names only one kind
    ("The prediction is incorrect"). A reply naming both kinds in other places ("CORRECT or
    WRONG") or neither is unparsed: labelled WRONG and reported as unparsed (parsed=False).
    """
    text = str(reply or "")
    label = _json_label(text)
    if label is not None:
        return label, True
    head = re.sub(r"^[\s\"'*`#>_\-:.()\[\]]*(?:(?:final\s+)?(?:label|judgement|judgment|verdict|answer|grade)"
                  r"\s*(?:is)?\s*[:=\-]?\s*)?[\s\"'*`_(\[]*", "", text, flags=re.IGNORECASE)
    first = _WORD.match(head)
    if first:
        return _label_of_word(first.group(1)), True
    kinds = {_label_of_word(w) for w in _WORD.findall(text)}
    if len(kinds) == 1:
        return kinds.pop(), True
    return WRONG, False


def prompt_settings() -> dict:
    """What identifies the prompt in summary.json and judge.json."""
    return {"prompt_version": JUDGE_PROMPT_VERSION, "system": JUDGE_SYSTEM, "template": JUDGE_TEMPLATE,
            "unparsed_rule": "labelled WRONG and counted (unparsed)"}
