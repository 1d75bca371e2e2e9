"""LoCoMo: a validating loader for locomo10.json, building the types of scgmem/api/types.py.

The file is a list of samples. Each sample has `sample_id`, `conversation` (speaker_a,
speaker_b, session_<n> turn lists and session_<n>_date_time strings) and `qa`. Real-file
quirks (integer answers, malformed evidence ids) are handled and counted in
`LoadReport`; structural problems raise `DataError` with a message naming the file, the
sample and the field, which the runner prints as one line (exit code 2).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from scgmem.api.data_source import DataError
from scgmem.api.paths import SAFE_NAME_RULE, is_safe_name
from scgmem.api.types import OFFICIAL_CATEGORIES, QA, Conversation, Session, Turn
from scgmem.data.evidence import LoadReport, parse_evidence
from scgmem.data.locomo_audit import AUDIT_PATH, GOLDS, apply_corrections, load_corrections, replaced_counts

_SESSION_KEY = re.compile(r"^session_(\d+)$")


def _require(obj: dict, key: str, kind, where: str):
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{where}: missing field '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(f"{where}: field '{key}' should be {names}, got {type(value).__name__} {str(value)[:40]!r}")
    return value


def _load_sessions(conv: dict, where: str) -> tuple[Session, ...]:
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.match(k)))
    if not numbers:
        raise DataError(f"{where}: no 'session_<n>' fields")
    sessions = []
    seen_ids: set[str] = set()
    for n in numbers:
        turns_raw = _require(conv, f"session_{n}", list, where)
        date = _require(conv, f"session_{n}_date_time", str, where)
        turns = []
        for j, t in enumerate(turns_raw):
            tw = f"{where}.session_{n}[{j}]"
            dia_id = _require(t, "dia_id", str, tw)
            speaker = _require(t, "speaker", str, tw)
            text = _require(t, "text", str, tw)
            caption = t.get("blip_caption")
            if caption is not None and not isinstance(caption, str):
                raise DataError(f"{tw}: field 'blip_caption' should be str, got {type(caption).__name__}")
            if dia_id in seen_ids:  # evidence points at turns by dia_id: it must name one turn
                raise DataError(f"{tw}: field 'dia_id' {dia_id[:40]!r} appears twice in the conversation")
            seen_ids.add(dia_id)
            turns.append(Turn(dia_id, speaker, text, n, date, caption or None))
        sessions.append(Session(n, date, tuple(turns)))
    return tuple(sessions)


def _load_qa(sample_id: str, raw: list, known: set[str], report: LoadReport, where: str) -> tuple[QA, ...]:
    out = []
    for i, q in enumerate(raw):
        qw = f"{where}.qa[{i}]"
        question = _require(q, "question", str, qw)
        category = _require(q, "category", int, qw)
        if category not in OFFICIAL_CATEGORIES:
            raise DataError(f"{qw}: field 'category' should be 1-5, got {category!r}")
        answer = q.get("answer")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            report.integer_answers += 1
            answer = str(answer)
        elif answer is not None and not isinstance(answer, str):
            raise DataError(f"{qw}: field 'answer' should be str or number, got {type(answer).__name__}")
        adversarial = q.get("adversarial_answer")
        if adversarial is not None:
            adversarial = str(adversarial)
        if answer is None and adversarial is None:
            raise DataError(f"{qw}: missing field 'answer' (and no 'adversarial_answer')")
        evidence = parse_evidence(q.get("evidence", []), known, report, qw)
        out.append(QA(sample_id, i, question, category, answer, adversarial, evidence))
    return tuple(out)


def load_locomo(path: str | Path) -> tuple[list[Conversation], LoadReport]:
    """Load and validate a LoCoMo JSON file.

    Returns:
        (conversations in file order, report of the quirks met).
    Raises:
        DataError: one-line message naming the file, sample and field.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found (data.path); run `make data`")
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}); is this the LoCoMo JSON?") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise DataError(f"{path}: not valid JSON ({str(e).splitlines()[0][:80]})") from None
    except RecursionError:
        raise DataError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(raw, list):
        raise DataError(f"{path}: top level should be a list of samples, got {type(raw).__name__}")
    if not raw:
        raise DataError(f"{path}: the list of samples is empty")
    report = LoadReport()
    conversations = []
    seen: set[str] = set()
    for s, sample in enumerate(raw):
        where = f"{path} sample[{s}]"
        sample_id = _require(sample, "sample_id", str, where)
        if not is_safe_name(sample_id):  # it names files: memory/<sample_id>.json, the memory cache
            raise DataError(f"{where}: field 'sample_id' must be {SAFE_NAME_RULE}, got {sample_id[:80]!r}")
        if sample_id in seen:
            raise DataError(f"{where}: field 'sample_id' {sample_id!r} appears twice")
        seen.add(sample_id)
        where = f"{path} sample {sample_id}"
        conv = _require(sample, "conversation", dict, where)
        speaker_a = _require(conv, "speaker_a", str, f"{where}.conversation")
        speaker_b = _require(conv, "speaker_b", str, f"{where}.conversation")
        sessions = _load_sessions(conv, f"{where}.conversation")
        known = {t.dia_id for sess in sessions for t in sess.turns}
        qa = _load_qa(sample_id, _require(sample, "qa", list, where), known, report, where)
        conversations.append(Conversation(sample_id, speaker_a, speaker_b, sessions, qa))
    return conversations, report


def select(conversations: list[Conversation], samples=None, max_sessions: int | None = None,
           source: str = "data") -> list[Conversation]:
    """Keep the named samples (in the order given) and the first `max_sessions` sessions.

    With `max_sessions`, only questions whose evidence lies inside the kept sessions stay
    (questions without evidence are dropped too: they cannot be attributed).
    """
    by_id = {c.sample_id: c for c in conversations}
    if samples:
        unknown = [s for s in samples if s not in by_id]
        if unknown:
            raise DataError(f"{source}: data.samples names unknown sample(s) {unknown}; known: {sorted(by_id)}")
        conversations = [by_id[s] for s in samples]
    if max_sessions is None:
        return list(conversations)
    if max_sessions <= 0:
        raise DataError(f"data.max_sessions must be positive, got {max_sessions}")
    out = []
    for c in conversations:
        sessions = c.sessions[:max_sessions]
        kept_ids = {t.dia_id for s in sessions for t in s.turns}
        qa = tuple(q for q in c.qa if q.evidence and set(q.evidence) <= kept_ids)
        out.append(Conversation(c.sample_id, c.speaker_a, c.speaker_b, sessions, qa))
    return out


def scored_questions(conv: Conversation, categories: dict[int, str], per_category: int | None = None) -> list[QA]:
    """The conversation's scored questions: categories in `categories` (the paper excludes 3),
    at most the first `per_category` of each, in file order."""
    taken: dict[int, int] = {}
    out = []
    for q in conv.qa:
        if q.category not in categories:
            continue
        if per_category is not None and taken.get(q.category, 0) >= per_category:
            continue
        taken[q.category] = taken.get(q.category, 0) + 1
        out.append(q)
    return out


def _positive_int_or_none(value, field: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise DataError(f"data.{field} must be a positive int, got {value!r}")
    return value


class LoCoMoSource:  # implements scgmem.api.data_source.DataSource
    """`configs/data/locomo.yaml`: the slice of LoCoMo a run uses. The values are checked when
    the config is instantiated, before any model loads; `load()` reads the file.

    Args:
        path: locomo10.json.
        samples: sample ids to keep, in this order (None = all ten).
        max_sessions: keep the first N sessions of each, and the questions whose evidence lies inside.
        questions_per_category: the first N scored questions of each category per conversation.
        categories: category number (1-5) -> name.
        scored_categories: the category numbers that are scored (keys of `categories`).
        gold: "original" (the file's answers and evidence) or "audited" (corrected where the public
            audit found them wrong: scgmem/data/locomo_audit.py, docs/scoring.md "Audited gold answers").
    """

    def __init__(self, path: str | Path, samples=None, max_sessions: int | None = None,
                 questions_per_category: int | None = None, categories=None, scored_categories=None,
                 gold: str = "original") -> None:
        if gold not in GOLDS:
            raise DataError(f"data.gold must be one of {list(GOLDS)}, got {gold!r}")
        self.gold = gold
        self._changed: dict = {}
        self._audit_source: dict = {}
        if samples is not None and (isinstance(samples, str) or not all(isinstance(s, str) for s in samples)):
            raise DataError(f"data.samples must be a list of sample ids such as [conv-26], got {samples!r}")
        self.path = str(path)
        self.samples = list(samples) if samples is not None else None
        self.max_sessions = _positive_int_or_none(max_sessions, "max_sessions")
        self.questions_per_category = _positive_int_or_none(questions_per_category, "questions_per_category")
        names = dict(OFFICIAL_CATEGORIES if categories is None else categories)
        bad = [k for k in names if str(k) not in {str(c) for c in OFFICIAL_CATEGORIES}]
        if bad:
            raise DataError(f"data.categories: category numbers are 1-5, got {bad}")
        self.categories = {int(k): str(v) for k, v in names.items()}
        scored = list(self.categories if scored_categories is None else scored_categories)
        unknown = [c for c in scored if str(c) not in {str(k) for k in self.categories}]
        if unknown:
            raise DataError(f"data.scored_categories: {unknown} not in data.categories {sorted(self.categories)}")
        self.scored_categories = [int(c) for c in scored]

    @property
    def scored(self) -> dict[int, str]:
        """The scored categories, number -> name."""
        return {c: self.categories[c] for c in self.scored_categories}

    def load(self) -> tuple[list[Conversation], LoadReport]:
        """The selected conversations (DataError names the file, sample and field) and the quirks met."""
        conversations, report = load_locomo(self.path)
        if self.gold == "audited":  # before `select`: corrected evidence decides which questions a slice keeps
            corrections = load_corrections()
            conversations, self._changed = apply_corrections(conversations, corrections)
            self._audit_source = corrections["_source"]
        return select(conversations, self.samples, self.max_sessions, source=self.path), report

    def summary_info(self, conversations: list[Conversation], report: LoadReport) -> dict:
        """The `data` block of summary.json, with the turns each conversation's memory ingested."""
        turns = {c.sample_id: len(c.turns) for c in conversations}
        return {"path": self.path, "samples": [c.sample_id for c in conversations], "max_sessions": self.max_sessions,
                "questions_per_category": self.questions_per_category, "load_report": report.as_dict(),
                "ingested_turns": turns, "ingested_turns_total": sum(turns.values()),
                "gold": self._gold_info(conversations)}

    def replaced_among(self, keys: set[tuple[str, int]]) -> dict:
        """Answers and evidence lists the gold replaced per category among `keys` ((sample_id, qa_index))."""
        return replaced_counts(self._changed, keys)

    def _gold_info(self, conversations: list[Conversation]) -> dict:
        """summary.json's `data.gold`: which gold, and for `audited` its source and the answers and
        evidence lists replaced per category among the questions this run scores."""
        if self.gold == "original":
            return {"gold": "original"}
        scored = {(q.sample_id, q.index) for c in conversations
                  for q in scored_questions(c, self.scored, self.questions_per_category)}
        return {"gold": "audited", "corrections": str(AUDIT_PATH.name), "source": self._audit_source.get("repository"),
                "commit": self._audit_source.get("commit"), "licence": self._audit_source.get("licence"),
                "replaced": self.replaced_among(scored)}
