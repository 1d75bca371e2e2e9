"""What a MemGPT question works on: the agent's state, and the context handed to the answer prompt.

`AgentState` is everything a question may change (each question starts from a copy of the
post-ingest state); `answer_context` is what the harness's answer prompt sees of it after the
question's heartbeat chain. docs/methods.md, section MemGPT.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scgmem.baselines.memgpt.functions import ArchivalStorage, CoreMemory, ToolResult
from scgmem.api import truncate_to_tokens


@dataclass
class AgentState:
    """Everything a question may change: core memory, archival storage and the FIFO queue."""

    core: CoreMemory
    archival: ArchivalStorage
    queue: list[dict[str, Any]] = field(default_factory=list)
    alerted: bool = False  # the memory-pressure alert was sent since the last summary
    messages_total: int = 0  # messages ever appended (summaries excluded)
    since_insert: list[str] = field(default_factory=list)  # provenance of the next archival insert
    now: str = ""  # the latest session date

    def clone(self) -> "AgentState":
        core = CoreMemory(self.core.blocks["persona"], self.core.blocks["human"], self.core.char_limit)
        return AgentState(core, self.archival.clone(), [dict(m) for m in self.queue], self.alerted,
                          self.messages_total, list(self.since_insert), self.now)


def answer_context(llm, state: AgentState, results: list[ToolResult], budget: int) -> tuple[str, list[str]]:
    """Core memory, the summary, this loop's search results and the FIFO tail, within `budget` tokens.

    Priority when the budget binds: search results, core memory, summary, then the newest turns.
    """
    count = llm.count_tokens
    core = "Core memory:\n" + state.core.render()
    summary = state.queue[0]["content"] if state.queue and state.queue[0]["kind"] == "summary" else ""
    found = ["Search results:"] + [r.message for r in results] if results else []
    turns = [m for m in state.queue if m["kind"] == "turn"]

    def render(parts_core, parts_summary, parts_found, tail):
        sections = [parts_core, parts_summary, "\n".join(parts_found),
                    "Recent messages:\n" + "\n".join(m["content"] for m in tail) if tail else ""]
        return "\n\n".join(s for s in sections if s)

    left = budget
    kept_found = []
    for text in found:
        piece = truncate_to_tokens(llm, text, left - 2)
        if piece:
            kept_found.append(piece)
            left -= count(piece) + 2
    kept_core = truncate_to_tokens(llm, core, left - 2)
    left -= count(kept_core) + 2 if kept_core else 0
    kept_summary = truncate_to_tokens(llm, summary, left - 2) if summary else ""
    left -= count(kept_summary) + 2 if kept_summary else 0
    tail: list[dict[str, Any]] = []
    left -= 6  # the "Recent messages:" header
    for m in reversed(turns):
        cost = count(m["content"]) + 1
        if cost > left:
            break
        tail.insert(0, m)
        left -= cost
    if kept_found == ["Search results:"]:
        kept_found = []
    context = render(kept_core, kept_summary, kept_found, tail)
    while tail and count(context) > budget:  # joins can cost more than estimated
        tail.pop(0)
        context = render(kept_core, kept_summary, kept_found, tail)
    if count(context) > budget:
        context = truncate_to_tokens(llm, context, budget)
    ids = [m["dia_id"] for m in tail]
    for r in results:
        for hit_ids, text in r.hits:
            if text and text in context:
                ids += hit_ids
    return context, list(dict.fromkeys(ids))
