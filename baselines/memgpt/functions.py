"""MemGPT's memory tiers and function set: core memory, recall and archival storage, paging.

docs/methods.md, section MemGPT; after MemGPT tag 0.3.25 [G1]:
`memgpt/functions/function_sets/base.py` (signatures, pagination, result strings),
`memgpt/memory.py` (core memory limits, substring recall search), `memgpt/data_types.py`
(archival chunks of 300 tokens). `pause_heartbeats` is dropped (no timed heartbeats here).

Every function returns a `ToolResult`; a failure is a result with ``ok=False`` and an error
string (the agent loop turns it into a heartbeat), never an exception.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from scgmem.baselines.locomo_text import parse_locomo_date
from scgmem.llm.embedder import cosine_top_k

SEARCH_FUNCTIONS = ("conversation_search", "conversation_search_date", "archival_memory_search")

# name -> (description, {param: description}); the listing the chatml wrapper compiles.
FUNCTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "send_message": ("Sends a message to the human user.", {
        "message": "Message contents. All unicode (including emojis) are supported."}),
    "core_memory_append": ("Append to the contents of core memory.", {
        "name": "Section of the memory to be edited (persona or human).",
        "content": "Content to write to the memory. All unicode (including emojis) are supported."}),
    "core_memory_replace": ("Replace the contents of core memory. To delete memories, use an empty string "
                            "for new_content.", {
        "name": "Section of the memory to be edited (persona or human).",
        "old_content": "String to replace. Must be an exact match.",
        "new_content": "Content to write to the memory. All unicode (including emojis) are supported."}),
    "conversation_search": ("Search prior conversation history using case-insensitive string matching.", {
        "query": "String to search for.",
        "page": "Allows you to page through results. Only use on a follow-up query. Defaults to 0 (first page)."}),
    "conversation_search_date": ("Search prior conversation history using a date range.", {
        "start_date": "The start of the date range to search, in the format 'YYYY-MM-DD'.",
        "end_date": "The end of the date range to search, in the format 'YYYY-MM-DD'.",
        "page": "Allows you to page through results. Only use on a follow-up query. Defaults to 0 (first page)."}),
    "archival_memory_insert": ("Add to archival memory. Make sure to phrase the memory contents such that it "
                               "can be easily queried later.", {
        "content": "Content to write to the memory. All unicode (including emojis) are supported."}),
    "archival_memory_search": ("Search archival memory using semantic (embedding-based) search.", {
        "query": "String to search for.",
        "page": "Allows you to page through results. Only use on a follow-up query. Defaults to 0 (first page)."}),
}
HEARTBEAT_PARAM = ("Request an immediate heartbeat after function execution. Set to 'true' if you want to "
                   "send a follow-up message or run a follow-up function.")
REQUIRED = {"send_message": ("message",), "core_memory_append": ("name", "content"),
            "core_memory_replace": ("name", "old_content", "new_content"), "conversation_search": ("query",),
            "conversation_search_date": ("start_date", "end_date"), "archival_memory_insert": ("content",),
            "archival_memory_search": ("query",)}


def function_block() -> str:
    """chatml.py::_compile_function_block: the function listing of the system message."""
    lines = ["Please select the most suitable function and parameters from the list of available functions "
             "below, based on the ongoing conversation. Provide your response in JSON format.",
             "Available functions:"]
    for name, (description, params) in FUNCTIONS.items():
        lines += [f"{name}:", f"  description: {description}", "  params:",
                  "    inner_thoughts: Deep inner monologue private to you only."]
        lines += [f"    {p}: {d}" for p, d in params.items()]
        if name != "send_message":
            lines.append(f"    request_heartbeat: {HEARTBEAT_PARAM}")
    return "\n".join(lines)


def iso_date(date_time: str) -> str | None:
    """LoCoMo session date -> 'YYYY-MM-DD' (None if it does not parse)."""
    parsed = parse_locomo_date(date_time)
    return parsed.strftime("%Y-%m-%d") if parsed else None


@dataclass
class ToolResult:
    """What a function call returned.

    Attributes:
        ok: False when the call failed (the loop then forces a heartbeat).
        message: the string the agent sees (MemGPT's function return).
        hits: for searches, (dia_ids, text) per result item: `text` is the item exactly as it
            appears in `message`, so the ids count as retrieved only if that text reaches the context.
    """

    ok: bool
    message: str
    hits: list[tuple[list[str], str]] = field(default_factory=list)


class FunctionFailed(Exception):
    """Raised inside a function; its text becomes the error string the agent sees."""


class CoreMemory:
    """The `<persona>` and `<human>` blocks, each at most `char_limit` characters."""

    def __init__(self, persona: str, human: str, char_limit: int = 2000) -> None:
        self.blocks = {"persona": persona, "human": human}
        self.char_limit = char_limit

    def _set(self, name: str, value: str) -> None:
        if name not in self.blocks:
            raise FunctionFailed(f"No memory section named {name!r} (use 'persona' or 'human')")
        if len(value) > self.char_limit:
            raise FunctionFailed(f"Edit failed: Exceeds {self.char_limit} character limit (requested {len(value)}).")
        self.blocks[name] = value

    def append(self, name: str, content: str) -> None:
        old = self.blocks.get(name, "")
        self._set(name, f"{old}\n{content}" if old else content)

    def replace(self, name: str, old_content: str, new_content: str) -> None:
        if name not in self.blocks:
            self._set(name, "")  # raises the unknown-section error
        if not old_content or old_content not in self.blocks[name]:
            raise FunctionFailed(f"Old content '{old_content}' not found in memory block '{name}' "
                                 "(must be an exact match)")
        self._set(name, self.blocks[name].replace(old_content, new_content))

    def render(self) -> str:
        return "\n".join(f"<{n}>\n{v}\n</{n}>" for n, v in self.blocks.items())


class RecallStorage:
    """The whole transcript: one entry per turn, searchable by substring and by date."""

    def __init__(self, entries: list[dict[str, Any]] | None = None) -> None:
        self.entries: list[dict[str, Any]] = list(entries or [])

    def add(self, dia_id: str, date_time: str, speaker: str, text: str) -> None:
        self.entries.append({"dia_id": dia_id, "date": date_time, "day": iso_date(date_time),
                             "speaker": speaker, "text": text})

    @staticmethod
    def line(entry: dict[str, Any]) -> str:
        return f"timestamp: {entry['date']}, {entry['speaker']} - {entry['text']}"

    def text_search(self, query: str, any_keyword: bool = False) -> list[dict[str, Any]]:
        """Case-insensitive substring match on `speaker - text` (memgpt/memory.py::text_search).

        `any_keyword` (off by default; not MemGPT) ORs the query's words of >= 3 letters.
        """
        needles = [query.lower()]
        if any_keyword:
            needles = [w for w in re.findall(r"[a-z0-9']{3,}", query.lower())] or needles
        return [e for e in self.entries
                if any(n in f"{e['speaker']} - {e['text']}".lower() for n in needles)]

    def date_search(self, start: str, end: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["day"] is not None and start <= e["day"] <= end]


class ArchivalStorage:
    """Passages inserted by the agent, chunked to ~`chunk_tokens` tokens, searched by cosine.

    Each passage keeps `provenance`: the dia_ids behind the insert (see MemGPT.provenance).
    The embedding matrix is never mutated in place (inserts build a new one), so clones
    made for independent questions can share it.
    """

    def __init__(self, embedder, count_tokens: Callable[[str], int], chunk_tokens: int = 300,
                 passages: list[dict[str, Any]] | None = None, matrix: np.ndarray | None = None) -> None:
        self.embedder = embedder
        self.count_tokens = count_tokens
        self.chunk_tokens = chunk_tokens
        self.passages: list[dict[str, Any]] = list(passages or [])
        if matrix is None:
            matrix = self._embed([p["content"] for p in self.passages])
        self.matrix = matrix  # (n_passages, d)

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.asarray(self.embedder.encode(texts), dtype=np.float32)

    def clone(self) -> "ArchivalStorage":
        return ArchivalStorage(self.embedder, self.count_tokens, self.chunk_tokens,
                               [dict(p) for p in self.passages], self.matrix)

    def chunk(self, content: str) -> list[str]:
        """Greedy word chunks of at most `chunk_tokens` tokens (data_types.py: 300)."""
        if self.count_tokens(content) <= self.chunk_tokens:
            return [content]
        chunks, current = [], []
        for word in content.split():
            if current and self.count_tokens(" ".join(current + [word])) > self.chunk_tokens:
                chunks.append(" ".join(current))
                current = []
            current.append(word)
        if current:
            chunks.append(" ".join(current))
        return chunks

    def insert(self, content: str, timestamp: str, provenance: list[str]) -> int:
        chunks = self.chunk(content)
        new = self._embed(chunks)
        self.matrix = new if self.matrix.size == 0 else np.vstack([self.matrix, new])
        self.passages += [{"content": c, "timestamp": timestamp, "provenance": list(provenance)} for c in chunks]
        return len(chunks)

    def search(self, query: str) -> list[dict[str, Any]]:
        """All passages, best first (the caller pages)."""
        if not self.passages:
            return []
        order = cosine_top_k(self._embed([query])[0], self.matrix, len(self.passages))
        return [self.passages[i] for i in order]


def paged(results: list, page: int, page_size: int, fmt: Callable[[Any], str],
          ids: Callable[[Any], list[str]]) -> ToolResult:
    """base.py's pagination: 'Showing x of y results (page p/P): [...]' with 0-based pages."""
    total = len(results)
    chunk = results[page * page_size:(page + 1) * page_size]
    if not chunk:
        return ToolResult(True, "No results found.")
    last_page = math.ceil(total / page_size) - 1
    items = [fmt(r) for r in chunk]
    message = f"Showing {len(chunk)} of {total} results (page {page}/{last_page}): {json.dumps(items)}"
    hits = [(ids(r), json.dumps(item)[1:-1]) for r, item in zip(chunk, items)]  # as escaped in message
    return ToolResult(True, message, hits)


def _page(args: dict[str, Any]) -> int:
    raw = args.get("page", 0)
    if raw in (None, ""):
        return 0
    try:
        page = int(raw)
    except (TypeError, ValueError):
        raise FunctionFailed(f"page must be an integer, got {raw!r}") from None
    if page < 0:
        raise FunctionFailed(f"page must be >= 0, got {page}")
    return page


def _string(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if value is None:
        raise FunctionFailed(f"missing required argument '{name}'")
    return value if isinstance(value, str) else json.dumps(value)


class Toolbox:
    """Executes one parsed call against an agent state (core memory, archival) and the recall store.

    Args:
        recall: the conversation's RecallStorage (shared; read-only at QA).
        page_size: results per page (RETRIEVAL_QUERY_DEFAULT_PAGE_SIZE = 5).
        return_char_limit: non-search returns are cut to this (FUNCTION_RETURN_CHAR_LIMIT = 3000;
            searches are exempt, as in MemGPT, since they page).
        any_keyword: OR the words of a conversation_search query (a counted deviation).
    """

    def __init__(self, recall: RecallStorage, page_size: int = 5, return_char_limit: int = 3000,
                 any_keyword: bool = False) -> None:
        self.recall = recall
        self.page_size = page_size
        self.return_char_limit = return_char_limit
        self.any_keyword = any_keyword

    def call(self, name: str, args: dict[str, Any], core: CoreMemory, archival: ArchivalStorage,
             now: str, provenance: list[str]) -> ToolResult:
        """Run `name(**args)`; unknown names, missing arguments and failures give ok=False."""
        if name not in FUNCTIONS:
            return ToolResult(False, f"No function named {name}")
        missing = [a for a in REQUIRED[name] if args.get(a) is None]
        if missing:
            return ToolResult(False, f"Error calling function {name}: missing required argument(s) {missing}")
        try:
            result = self._dispatch(name, args, core, archival, now, provenance)
        except FunctionFailed as e:
            result = ToolResult(False, f"Error calling function {name}: {e}")
        if (name not in SEARCH_FUNCTIONS or not result.ok) and len(result.message) > self.return_char_limit:
            result.message = result.message[:self.return_char_limit]
        return result

    def _dispatch(self, name, args, core, archival, now, provenance) -> ToolResult:
        if name == "send_message":
            return ToolResult(True, "None")
        if name == "core_memory_append":
            core.append(_string(args, "name"), _string(args, "content"))
            return ToolResult(True, "None")
        if name == "core_memory_replace":
            core.replace(_string(args, "name"), _string(args, "old_content"), _string(args, "new_content"))
            return ToolResult(True, "None")
        if name == "archival_memory_insert":
            archival.insert(_string(args, "content"), now, provenance)
            return ToolResult(True, "None")
        page = _page(args)
        if name == "conversation_search":
            found = self.recall.text_search(_string(args, "query"), self.any_keyword)
            return paged(found, page, self.page_size, RecallStorage.line, lambda e: [e["dia_id"]])
        if name == "conversation_search_date":
            start, end = _string(args, "start_date").strip(), _string(args, "end_date").strip()
            for label, value in (("start_date", start), ("end_date", end)):
                if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
                    raise FunctionFailed(f"{label} must be in the format 'YYYY-MM-DD', got {value!r}")
            found = self.recall.date_search(start, end)
            return paged(found, page, self.page_size, RecallStorage.line, lambda e: [e["dia_id"]])
        found = archival.search(_string(args, "query"))  # archival_memory_search
        return paged(found, page, self.page_size, lambda p: f"timestamp: {p['timestamp']}, memory: {p['content']}",
                     lambda p: list(p["provenance"]))
