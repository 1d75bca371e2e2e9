"""`data.gold=audited`: LoCoMo's gold answers and evidence as corrected by a public audit.

The corrections (scgmem/data/locomo_audit.json, built by scripts/build_locomo_audit.py from
github.com/dial481/locomo-audit, CC BY-NC 4.0; source, commit and licence in its `_source`
header) are keyed "<sample_id>:<qa_index>". Applying them to the loaded conversations:

- the answer is replaced by the audit's `corrected_answer` where it has one (the 99 entries whose
  error changes the answer: HALLUCINATION, TEMPORAL_ERROR, ATTRIBUTION_ERROR, AMBIGUOUS,
  INCOMPLETE; WRONG_CITATION entries keep the gold answer);
- the evidence ids are replaced by the audit's `corrected_evidence` where they differ (all
  error types), read the way the loader reads the file's own (`parse_evidence`).

Every entry's question text must be the data file's, or loading stops naming the entry: the
corrections were built for locomo10.json with sha256 79fa87e9...ea698ff4.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from scgmem.api.data_source import DataError
from scgmem.api.types import Conversation
from scgmem.data.evidence import LoadReport, parse_evidence

GOLDS = ("original", "audited")
AUDIT_PATH = Path(__file__).with_name("locomo_audit.json")
_ENTRY_FIELDS = ("question", "category", "error_type", "corrected_answer", "corrected_evidence")


def load_corrections(path: str | Path = AUDIT_PATH) -> dict:
    """{"_source": {...}, "entries": {key: entry}}; DataError naming the file and field on bad input."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: corrections file not found (data.gold=audited)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), dict) or not isinstance(raw.get("_source"), dict):
        raise DataError(f"{path}: expected an object with '_source' and 'entries' objects")
    for key, entry in raw["entries"].items():
        missing = [f for f in _ENTRY_FIELDS if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise DataError(f"{path}: entry {key!r}: missing field '{missing[0]}'")
        if not isinstance(entry["corrected_evidence"], list):
            raise DataError(f"{path}: entry {key!r}: field 'corrected_evidence' should be list")
    return raw


def apply_corrections(conversations: list[Conversation], corrections: dict, source: str | Path = AUDIT_PATH
                      ) -> tuple[list[Conversation], dict[tuple[str, int], dict]]:
    """The conversations with corrected answers and evidence, and what changed per question:
    {(sample_id, qa_index): {"category", "error_type", "answer": bool, "evidence": bool}} for
    every audited question of these conversations (changed or not)."""
    entries = corrections["entries"]
    changed: dict[tuple[str, int], dict] = {}
    out = []
    for conv in conversations:
        known = {t.dia_id for t in conv.turns}
        qa = list(conv.qa)
        for i, q in enumerate(qa):
            entry = entries.get(f"{q.sample_id}:{q.index}")
            if entry is None:
                continue
            where = f"{source} entry '{q.sample_id}:{q.index}'"
            if entry["question"] != q.question or entry["category"] != q.category:
                raise DataError(f"{where}: question or category differ from the data file's "
                                f"({q.question[:60]!r}, category {q.category}); the corrections were built for "
                                "locomo10.json sha256 79fa87e9...ea698ff4")
            answer = q.answer if entry["corrected_answer"] is None else str(entry["corrected_answer"])
            evidence = parse_evidence(entry["corrected_evidence"], known, LoadReport(), where)
            qa[i] = dataclasses.replace(q, answer=answer, evidence=evidence)
            changed[(q.sample_id, q.index)] = {"category": q.category, "error_type": entry["error_type"],
                                               "answer": answer != q.answer, "evidence": evidence != q.evidence}
        out.append(dataclasses.replace(conv, qa=tuple(qa)))
    return out, changed


def replaced_counts(changed: dict[tuple[str, int], dict], scored: set[tuple[str, int]]) -> dict:
    """Per category (str number): answers and evidence lists replaced among the `scored` questions."""
    out: dict[str, dict[str, int]] = {}
    for key, c in changed.items():
        if key not in scored:
            continue
        row = out.setdefault(str(c["category"]), {"answers": 0, "evidence": 0})
        row["answers"] += int(c["answer"])
        row["evidence"] += int(c["evidence"])
    return dict(sorted(out.items()))
