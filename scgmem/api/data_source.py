"""The contract between the harness and a dataset: `DataSource`.

The runner instantiates the `data` config group (`_target_` plus arguments), calls `load()`
once, and reads the rest of what it needs from the source. A new benchmark in LoCoMo's shape
(conversations of dated sessions, questions with categories and evidence) plugs in by
implementing these four members and adding `configs/data/<name>.yaml`
(docs/architecture.md, "Add a dataset"); `scgmem.data.locomo.LoCoMoSource` is the reference.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from scgmem.api.types import Conversation


class DataError(ValueError):
    """A problem in a dataset file or its settings; str(e) is the one-line message the runner
    prints (exit code 2). Name the file, the record and the field."""


class LoadNotes(Protocol):
    """What a load met and counted without failing (quirks of the file), for summary.json."""

    def as_dict(self) -> dict: ...


@runtime_checkable
class DataSource(Protocol):
    """A dataset slice the runner can evaluate.

    Attributes:
        questions_per_category: the first N scored questions of each category per conversation
            (None = all), applied by the pipeline.
    """

    questions_per_category: int | None

    @property
    def scored(self) -> dict[int, str]:
        """The scored categories, number -> name (summary.json's `categories` keys)."""
        ...

    def load(self) -> tuple[list[Conversation], LoadNotes]:
        """The selected conversations, in run order, and the load notes. Raises DataError.
        Every `sample_id` must be a safe file name (`scgmem.api.paths.is_safe_name`)."""
        ...

    def summary_info(self, conversations: list[Conversation], notes: LoadNotes) -> dict:
        """summary.json's `data` block: at least `samples` (ids in order) and `ingested_turns`
        (sample_id -> turns the memory ingested)."""
        ...
