"""Category 5 (adversarial) apart: what the answers to the trap questions say, and the average without them.

A category-5 question asks about something the conversation does not say; the answer prompt
offers two options, "Not mentioned in the conversation" and the item's `adversarial_answer`
(the trap). Protocols score it differently (docs/scoring.md, "Category 5"): A-MEM's code (the
paper's) scores the answer against the trap, so taking the trap scores highest; LoCoMo's code
credits an answer that says the information is not there; mem0 leaves the category out. These
numbers read the answers themselves, whatever the protocol:

- `refusal_rate`: share of answers that say the information is not in the conversation, by
  LoCoMo's own rule (task_eval/evaluation.py `eval_question_answering`, category 5, branch
  `code` @ 9228632 of github.com/snap-research/locomo): the lowercased answer contains
  "no information available" or "not mentioned". Under protocol=locomo the answer is read after
  LoCoMo's option-letter mapping ("(a)" -> the first option), as its scorer reads it.
- `trap_exact_rate`: share of answers that are the trap answer itself (`_norm` equal).
- `both_options_rate`: share that repeat both options (refusal phrase and the trap's words,
  e.g. "Not mentioned in the conversation or self-care is important").
- `trap_repeat_rate`: share that contain the trap answer's words at all (exact, both options,
  or the trap inside a longer answer without a refusal).
- `refusal_only_rate`: refusal without the trap's words: the answer the question is meant to get.
- `f1_share`: of the category's summed F1 (against the protocol's reference), the share each
  kind of answer supplies.

`average_1_4`: the paper's Average (unweighted mean of category means) over the scored
categories other than 5 (by default 1, 2 and 4), and LoCoMo's question-weighted Overall over
the same questions.
"""
from __future__ import annotations

import re
import string
from typing import Iterable, Mapping, Sequence

import numpy as np

from scgmem.api.types import QA
from scgmem.scoring.metrics import aggregate

ADVERSARIAL = 5
# Category-5 "right" option, verbatim in both upstream codes.
NOT_MENTIONED = "Not mentioned in the conversation"
# LoCoMo task_eval/evaluation.py: `'no information available' in output.lower() or 'not mentioned' in output.lower()`
REFUSAL_PHRASES = ("no information available", "not mentioned")
KINDS = ("trap_exact", "both_options", "trap_inside", "refusal_only", "other")
NOTES = {
    "average_1_4": "the paper's Average (unweighted mean of category means) over the scored categories 1-4 "
                   "only, so the trap questions of category 5 do not move it; overall_weighted: the same "
                   "questions weighted by count",
    "refusal_rate": "category-5 answers saying the information is not in the conversation (LoCoMo's rule: "
                    "contains 'not mentioned' or 'no information available'); higher is better",
    "trap_exact_rate": "category-5 answers that are exactly the trap answer (adversarial_answer); A-MEM's "
                       "scoring gives them full F1",
    "both_options_rate": "category-5 answers that repeat both options ('Not mentioned ... or <trap>'): "
                         "LoCoMo's rule counts them as refusals, A-MEM's scoring gives them partial F1",
    "trap_repeat_rate": "category-5 answers containing the trap answer's words (exact, both options, or "
                        "inside a longer answer); lower is better",
    "refusal_only_rate": "category-5 answers that refuse without repeating the trap: the intended answer",
    "f1_share": "share of category 5's summed F1 (against the protocol's reference) supplied by each kind "
                "of answer",
}

_PUNCT = str.maketrans({c: " " for c in string.punctuation})


def _norm(text: str) -> str:
    """Lowercase, punctuation -> space, whitespace collapsed: "LGBTQ+ individuals." -> "lgbtq individuals"."""
    return " ".join(str(text).lower().translate(_PUNCT).split())


def says_not_mentioned(answer: str) -> bool:
    """LoCoMo's category-5 rule: the lowercased answer contains one of `REFUSAL_PHRASES`."""
    text = str(answer).lower()
    return any(p in text for p in REFUSAL_PHRASES)


def contains_words(answer: str, trap: str) -> bool:
    """Whether the trap's normalised words appear as a run of whole words in the normalised answer."""
    a, t = _norm(answer), _norm(trap)
    return bool(t) and re.search(rf"(?:^| ){re.escape(t)}(?: |$)", a) is not None


def answer_kind(answer: str, trap: str) -> str:
    """One of `KINDS`: trap_exact, both_options (refusal + the trap's words), trap_inside (the trap's
    words without a refusal), refusal_only, other."""
    refuses = says_not_mentioned(answer)
    if _norm(answer) == _norm(trap) and _norm(trap):
        return "trap_exact"
    if contains_words(answer, trap):
        return "both_options" if refuses else "trap_inside"
    return "refusal_only" if refuses else "other"


def cat5_distractor(qa: QA) -> str:
    """The adversarial option. Both upstream codes use the item's answer field; in
    locomo10.json the distractor lives in `adversarial_answer` (all 446 category-5 items)."""
    text = qa.adversarial_answer if qa.adversarial_answer is not None else qa.answer
    if text is None:
        raise ValueError(f"{qa.sample_id} qa[{qa.index}]: category-5 question has neither "
                         f"adversarial_answer nor answer")
    return text


def seeded_options(qa: QA, rng: np.random.Generator) -> list[str]:
    """The two category-5 options in an order drawn from `rng` (upstream: unseeded
    `random.random() < 0.5` puts "Not mentioned" first). One draw; nothing else is read."""
    distractor = cat5_distractor(qa)
    return [NOT_MENTIONED, distractor] if rng.random() < 0.5 else [distractor, NOT_MENTIONED]


def resolve_option(prediction: str, options: Sequence[str] | None) -> str:
    """LoCoMo's `get_cat_5_answer` (protocol=locomo shows the options as (a)/(b)): a 1-character
    answer containing "a" -> option (a), any other 1-character answer -> (b); a 3-character answer
    containing "(a)" -> (a), else (b); anything longer is returned stripped and lowercased."""
    text = str(prediction).strip().lower()
    if options is None or len(options) != 2 or len(text) not in (1, 3):
        return text
    if len(text) == 1:
        return options[0] if "a" in text else options[1]
    return options[0] if "(a)" in text else options[1]


def _trap(record: Mapping) -> str | None:
    """The trap answer: the option that is not "Not mentioned", from the record's `options`."""
    options = record.get("options") or []
    others = [o for o in options if not says_not_mentioned(o)]
    return others[0] if len(others) == 1 else None


def _said(record: Mapping, letter_options: bool) -> str:
    prediction = str(record.get("prediction", ""))
    if letter_options:  # protocol=locomo shows (a)/(b): read the letter as LoCoMo's scorer does
        return resolve_option(prediction, record.get("options"))
    return prediction


def adversarial_stats(records: Iterable[Mapping], protocol: str | None = None) -> dict | None:
    """Category-5 answer statistics (module docstring) over `records` (predictions.jsonl rows with
    `category`, `prediction`, `options`, `f1`). None when there is no category-5 record.

    Records without a recorded trap option (no `options`) count in `n` and in `refusal_rate` and
    are left out of the trap numbers (`n_with_trap` says how many had one)."""
    rows = [r for r in records if int(r["category"]) == ADVERSARIAL]
    if not rows:
        return None
    letters = protocol == "locomo"
    counts = {k: 0 for k in KINDS}
    f1_by_kind = {k: 0.0 for k in KINDS}
    refusals = with_trap = 0
    for r in rows:
        said = _said(r, letters)
        refusals += says_not_mentioned(said)
        trap = _trap(r)
        if trap is None:
            continue
        with_trap += 1
        kind = answer_kind(said, trap)
        counts[kind] += 1
        f1_by_kind[kind] += float(r.get("f1") or 0.0)
    total_f1 = sum(f1_by_kind.values())

    def share(k: int) -> float | None:
        return k / with_trap if with_trap else None

    return {
        "n": len(rows), "n_with_trap": with_trap,
        "refusal_rate": refusals / len(rows),
        "trap_exact_rate": share(counts["trap_exact"]),
        "both_options_rate": share(counts["both_options"]),
        "trap_repeat_rate": share(counts["trap_exact"] + counts["both_options"] + counts["trap_inside"]),
        "refusal_only_rate": share(counts["refusal_only"]),
        "counts": counts,
        "mean_f1_by_kind": {k: (100.0 * f1_by_kind[k] / counts[k] if counts[k] else None) for k in KINDS},
        "f1_share": {k: (f1_by_kind[k] / total_f1 if total_f1 else None) for k in KINDS},
        "rule": "LoCoMo task_eval/evaluation.py: answer.lower() contains 'not mentioned' or "
                "'no information available'" + (" (after its option-letter mapping)" if letters else ""),
    }


def average_1_4(records: Sequence[Mapping], categories: Mapping[int, str]) -> dict | None:
    """The paper's Average and LoCoMo's Overall over the scored categories other than 5 (percent),
    with the category numbers used; None when no such category is scored."""
    kept = {int(c): n for c, n in categories.items() if int(c) != ADVERSARIAL}
    if not kept:
        return None
    scores = aggregate([r for r in records if int(r["category"]) in kept], kept)
    return {"categories": sorted(kept), **scores["average"], "overall_weighted": scores["overall_weighted"]}


def summary_fields(records: Sequence[Mapping], categories: Mapping[int, str], protocol: str | None) -> dict:
    """The summary.json fields of this module: `average_1_4` and `category5`, each with its notes
    (None where the run scores no such question)."""
    avg = average_1_4(records, categories)
    stats = adversarial_stats(records, protocol) if ADVERSARIAL in {int(c) for c in categories} else None
    return {
        "average_1_4": None if avg is None else {**avg, "note": NOTES["average_1_4"]},
        "category5": None if stats is None else {**stats, "notes": {k: v for k, v in NOTES.items()
                                                                     if k != "average_1_4"}},
    }
