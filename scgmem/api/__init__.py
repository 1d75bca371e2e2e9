"""The contract between the harness and every memory method (SCG-Mem and the baselines).

- `types`   the data: `Conversation` of `Session`s of `Turn`s, its questions (`QA`), `OFFICIAL_CATEGORIES`
- `method`  `MemoryMethod` (ingest, recall_batch), `Recall`, and the helpers that render turns as memory text
- `data_source`  `DataSource` (what a dataset gives the runner) and `DataError`
- `paths`   safe file names from data, and `path_under`
- `settings`  the checks of a method's settings (`check_int`, `check_choice`, ...), one message form

Methods import from here only; the LoCoMo loader (scgmem.data) builds the types, the harness
(scgmem.harness) drives the methods.
"""
from scgmem.api.data_source import DataError, DataSource
from scgmem.api.method import MemoryMethod, Recall, dia_order, render_turn, render_turns_by_date, truncate_to_tokens
from scgmem.api.types import OFFICIAL_CATEGORIES, QA, Conversation, Session, Turn

__all__ = ["DataError", "DataSource", "OFFICIAL_CATEGORIES", "QA", "Conversation", "Session", "Turn", "MemoryMethod", "Recall", "dia_order",
           "render_turn", "render_turns_by_date", "truncate_to_tokens"]
