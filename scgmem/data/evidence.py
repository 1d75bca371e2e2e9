"""LoCoMo's evidence ids ("D<session>:<turn>"), read the same way from the data file and from the
audit's corrections (scgmem/data/locomo.py, scgmem/data/locomo_audit.py), and `LoadReport`, the
quirks counted while reading them and the rest of the file (counted, not fatal).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from scgmem.api.data_source import DataError

_DIA_ID = re.compile(r"^D(\d+):(\d+)$")


@dataclass
class LoadReport:
    """Quirks met while loading (counted, not fatal)."""

    integer_answers: int = 0
    malformed_evidence: int = 0  # ids that could not be parsed ("D", "D:11:26", ...)
    split_evidence: int = 0  # entries holding several ids ("D8:6; D9:17")
    dangling_evidence: int = 0  # well-formed ids that point at no turn
    renumbered_evidence: int = 0  # ids written with leading zeros ("D30:05" read as "D30:5")
    examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "examples"} | {"examples": self.examples[:10]}


def parse_evidence(raw: list, known: set[str], report: LoadReport, where: str) -> tuple[str, ...]:
    """Split on ';' and spaces, keep well-formed ids; count what is dropped or dangling."""
    if not isinstance(raw, list):
        raise DataError(f"{where}: field 'evidence' should be list, got {type(raw).__name__}")
    kept: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            raise DataError(f"{where}: evidence entry should be str, got {type(entry).__name__} {entry!r}")
        parts = [p for p in re.split(r"[;\s]+", entry.strip()) if p]
        if len(parts) > 1:
            report.split_evidence += 1
        for part in parts:
            m = _DIA_ID.match(part)
            if not m:
                report.malformed_evidence += 1
                report.examples.append(f"{where}: malformed evidence id {part!r}")
                continue
            canonical = f"D{int(m.group(1))}:{int(m.group(2))}"  # "D30:05" -> "D30:5", the turn's own id
            if canonical != part:
                report.renumbered_evidence += 1
                report.examples.append(f"{where}: evidence id {part!r} read as {canonical!r}")
            part = canonical
            if part not in known:
                report.dangling_evidence += 1
            if part not in kept:
                kept.append(part)
    return tuple(kept)
