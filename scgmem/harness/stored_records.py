"""predictions.jsonl read back on a resume: every record must be one the current run would write.

A resumed run counts its stored records into summary.json, so a stray, duplicated or edited
record would change the numbers with exit code 0. Each record must

- name a question this run asks (its sample and `qa_index` among the scored, selected questions of
  the current data), once;
- carry that question's category, text, reference (the gold under `data.gold`) and evidence;
- carry the category-5 options in the order this seed shows them;
- recompute to its stored scores: every answer metric from its prediction, evidence recall from
  its retrieved turns, and (answer_format=json) the prediction from its raw reply;
- hold counts and timings of the right type and range (summary.json adds them up).

Anything else is refused in one line naming the file, the line, the field and the value. BERTScore
(a model) is not recomputed: it must lie in [0, 1].
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Sequence

from scgmem.harness.untrusted import StoredFileError, need_int, need_number, need_str
from scgmem.scoring.answer_format import ANSWER_READS
from scgmem.scoring.metric_table import answer_metrics
from scgmem.scoring.metrics import evidence_recall

# Stored and recomputed scores agree to the last bits (JSON round-trips floats exactly); the slack
# only absorbs a summation order that differs between platforms.
TOLERANCE = 1e-9
MAX_TEXT = 1 << 20  # a prediction or reply: answers are capped at tens of tokens
MAX_LIST = 100_000  # retrieved dia_ids, generated keys


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) \
            or not isinstance(b, (int, float)) or not math.isfinite(a):
        return a == b
    return abs(a - b) <= TOLERANCE


def _str_list(value, path, field: str) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_LIST or not all(isinstance(v, str) for v in value):
        raise StoredFileError(path, field, value, f"must be a list of at most {MAX_LIST} strings")
    return value


def check_record(r: dict, q, protocol, path, where: str, prompt) -> None:
    """Refuse record `r` unless it is what the pipeline writes for question `q` (see the module
    docstring); `prompt`: the AnswerPrompt this run builds for `q` (its category-5 options, in the
    order this seed shows them, and the text the reply continues)."""
    options = prompt.options
    def field(name: str) -> str:
        return f"{where}: field {name!r}"

    def need_equal(name: str, expected) -> None:
        if r.get(name) != expected or type(r.get(name)) is not type(expected):
            raise StoredFileError(path, field(name), r.get(name), f"differs from the data ({expected!r})"[:200])

    need_equal("category", q.category)
    need_equal("question", q.question)
    need_equal("reference", protocol.reference(q))
    need_equal("evidence", list(q.evidence))
    if r.get("options") != options:
        raise StoredFileError(path, field("options"), r.get("options"),
                              f"not the options this seed shows ({options!r})")
    prediction = need_str(r.get("prediction"), path, field("prediction"), MAX_TEXT)
    if "reply" in r or "answer_parsed" in r:  # answer_format=json: the prediction is read from the reply
        reply = need_str(r.get("reply"), path, field("reply"), MAX_TEXT)
        if r.get("answer_read") is not None and r["answer_read"] not in ANSWER_READS:
            raise StoredFileError(path, field("answer_read"), r["answer_read"], f"must be one of {ANSWER_READS}")
        if r.get("answer_read") is not None:  # records older than answer_read were read by older rules
            answer, fields = protocol.extract_answer(reply, prompt)
            if answer != prediction:
                raise StoredFileError(path, field("prediction"), prediction, f"is not what its reply reads as ({answer!r})")
            for key, value in fields.items():
                if r.get(key) != value:
                    raise StoredFileError(path, field(key), r.get(key), f"its reply reads as {value!r}")
        elif not isinstance(r.get("answer_parsed"), bool):
            raise StoredFileError(path, field("answer_parsed"), r.get("answer_parsed"), "must be true or false")
    scores = protocol.score(q, prediction, options=options)
    for metric in answer_metrics():
        if not _same(r.get(metric.name), scores[metric.name]):
            raise StoredFileError(path, field(metric.name), r.get(metric.name),
                                  f"its prediction scores {scores[metric.name]!r}")
    retrieved = _str_list(r.get("retrieved"), path, field("retrieved"))
    if not _same(r.get("evidence_recall"), evidence_recall(q.evidence, retrieved)):
        raise StoredFileError(path, field("evidence_recall"), r.get("evidence_recall"),
                              f"its retrieved turns give {evidence_recall(q.evidence, retrieved)!r}")
    if r.get("bertscore_f1") is not None:
        need_number(r["bertscore_f1"], path, field("bertscore_f1"), -1.0, 1.0)  # rescaled BERTScore may be < 0
    need_number(r.get("latency_s"), path, field("latency_s"), 0.0, 1e7)
    for name in ("prompt_tokens", "context_tokens"):  # absent in records older than the counts
        if name in r:
            need_int(r[name], path, field(name), 0, 10**9)
    if "context_turns" in r and r["context_turns"] != len(retrieved):
        raise StoredFileError(path, field("context_turns"), r["context_turns"],
                              f"must count the retrieved turns ({len(retrieved)})")
    for name in ("generated_keys", "seed_keys", "context_keys"):  # summed into the hallucination rate
        if name in r:
            _str_list(r[name], path, field(name))


def check_stored_records(records: Sequence[dict], path: Path, questions: Sequence, protocol,
                         prompt_of: Callable[[object], object]) -> None:
    """Refuse `records` (read from `path` in file order) unless each is a distinct record of one of
    `questions` (the run's scored, selected questions) that `check_record` accepts.
    `prompt_of(q)`: the AnswerPrompt the run builds for `q` (with any context: only its options and
    assistant prefix are read)."""
    by_key = {(q.sample_id, q.index): q for q in questions}
    seen: dict[tuple, int] = {}
    for number, r in enumerate(records, 1):
        key = (r.get("sample_id"), r.get("qa_index"))
        where = f"line {number} ({key[0]} qa {key[1]})"
        q = by_key.get(key)
        if q is None:
            raise StoredFileError(path, f"line {number}: field 'qa_index'", key[1],
                                  f"{key[0]!r} qa {key[1]!r} is not a question this run asks of the data "
                                  "(another data file, slice or category set?)")
        if key in seen:
            raise StoredFileError(path, f"line {number}: field 'qa_index'", key[1],
                                  f"duplicate of line {seen[key]}: each question is answered once")
        seen[key] = number
        check_record(r, q, protocol, path, where, prompt_of(q))
