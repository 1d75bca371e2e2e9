"""A toy dataset added the documented way (docs/architecture.md, "Add a dataset"): a class that
implements scgmem.api.DataSource, and a config file naming it (see test_data_source.py)."""
from __future__ import annotations

from scgmem.api import QA, Conversation, DataError, Session, Turn


class Notes:
    def as_dict(self) -> dict:
        return {"source": "toy"}


class ToySource:
    """One two-session conversation about a bakery, with one question of each scored category."""

    def __init__(self, name: str = "toy-1", questions_per_category: int | None = None) -> None:
        if not name.isidentifier() and not name.replace("-", "_").isidentifier():
            raise DataError(f"data.name: {name!r} is not a plain name")
        self.name, self.questions_per_category = name, questions_per_category

    @property
    def scored(self) -> dict[int, str]:
        return {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}

    def load(self) -> tuple[list[Conversation], Notes]:
        d1, d2 = "10:00 am on 3 March, 2024", "9:00 am on 10 March, 2024"
        s1 = (Turn("D1:1", "Ann", "I opened a bakery on Elm Street.", 1, d1),
              Turn("D1:2", "Bo", "Congratulations! What do you bake?", 1, d1),
              Turn("D1:3", "Ann", "Mostly sourdough and rye bread.", 1, d1))
        s2 = (Turn("D2:1", "Bo", "I adopted a cat named Miso.", 2, d2),
              Turn("D2:2", "Ann", "Miso can visit the bakery any time.", 2, d2))
        qa = (QA(self.name, 0, "Where is Ann's bakery and what does she bake?", 1, "Elm Street; sourdough and rye",
                 None, ("D1:1", "D1:3")),
              QA(self.name, 1, "When did Ann open her bakery?", 2, "March 2024", None, ("D1:1",)),
              QA(self.name, 2, "What is the name of Bo's cat?", 4, "Miso", None, ("D2:1",)),
              QA(self.name, 3, "What is the name of Ann's cat?", 5, None, "Miso", ("D2:1",)))
        conv = Conversation(self.name, "Ann", "Bo", (Session(1, d1, s1), Session(2, d2, s2)), qa)
        return [conv], Notes()

    def summary_info(self, conversations: list[Conversation], notes: Notes) -> dict:
        turns = {c.sample_id: len(c.turns) for c in conversations}
        return {"samples": list(turns), "ingested_turns": turns, "ingested_turns_total": sum(turns.values()),
                "questions_per_category": self.questions_per_category, "load_report": notes.as_dict()}
