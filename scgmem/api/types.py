"""The data every method and the harness share: a conversation of dated sessions of turns, and its questions.

The LoCoMo loader (scgmem/data/locomo.py) builds these from locomo10.json; methods see only
these types, never the file.
"""
from __future__ import annotations

from dataclasses import dataclass

# Official LoCoMo category numbers (the paper's column names follow them). Some
# harnesses (mem0 and copies) use another mapping; it is a config value (data.categories).
OFFICIAL_CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}


@dataclass(frozen=True)
class Turn:
    """One dialogue turn d(t)."""

    dia_id: str  # "D<session>:<turn>"
    speaker: str
    text: str
    session: int  # session number (1-based, as in the file)
    date_time: str  # the session's date string, e.g. "1:56 pm on 8 May, 2023"
    caption: str | None = None  # blip_caption of a shared image


@dataclass(frozen=True)
class Session:
    index: int
    date_time: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class QA:
    """One question. `index` is its position in the sample's `qa` list (the stable id)."""

    sample_id: str
    index: int
    question: str
    category: int
    answer: str | None  # cast to str (some are integers); None for most category-5 items
    adversarial_answer: str | None
    evidence: tuple[str, ...]  # well-formed dia_ids only


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    qa: tuple[QA, ...]

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]
