"""MemGPT's functions and storages: core memory edits, recall and archival search, paging, errors."""
from __future__ import annotations

import json

from scgmem.baselines.memgpt.functions import (ArchivalStorage, CoreMemory, RecallStorage, Toolbox, function_block,
                                        iso_date)
from tests.baselines import BagEmbedder


def test_function_listing_names_every_function_and_the_heartbeat():
    block = function_block()
    for name in ("send_message", "core_memory_append", "core_memory_replace", "conversation_search",
                 "conversation_search_date", "archival_memory_insert", "archival_memory_search"):
        assert f"\n{name}:\n" in block
    assert "pause_heartbeats" not in block and block.count("request_heartbeat:") == 6


def test_core_memory_overflow_fails_and_leaves_the_block():
    core = CoreMemory("p", "h", char_limit=20)
    box = Toolbox(RecallStorage())
    archival = ArchivalStorage(BagEmbedder(), lambda t: len(t.split()))
    ok = box.call("core_memory_append", {"name": "human", "content": "likes tea"}, core, archival, "now", [])
    assert ok.ok and core.blocks["human"] == "h\nlikes tea"
    bad = box.call("core_memory_append", {"name": "human", "content": "x" * 30}, core, archival, "now", [])
    assert not bad.ok and "Exceeds 20 character limit (requested 42)" in bad.message
    assert core.blocks["human"] == "h\nlikes tea"
    other = box.call("core_memory_append", {"name": "friends", "content": "x"}, core, archival, "now", [])
    assert not other.ok and "No memory section named 'friends'" in other.message


def test_core_memory_replace_needs_an_exact_match():
    core = CoreMemory("p", "Caroline likes tea.", char_limit=2000)
    box = Toolbox(RecallStorage())
    archival = ArchivalStorage(BagEmbedder(), lambda t: len(t.split()))
    bad = box.call("core_memory_replace", {"name": "human", "old_content": "caroline likes tea",
                                           "new_content": "x"}, core, archival, "now", [])
    assert not bad.ok and "not found" in bad.message and core.blocks["human"] == "Caroline likes tea."
    ok = box.call("core_memory_replace", {"name": "human", "old_content": "tea", "new_content": "coffee"},
                  core, archival, "now", [])
    assert ok.ok and core.blocks["human"] == "Caroline likes coffee."
    missing = box.call("core_memory_replace", {"name": "human", "old_content": "tea"}, core, archival, "now", [])
    assert not missing.ok and "missing required argument(s) ['new_content']" in missing.message


def test_conversation_search_pages_case_insensitively():
    recall = RecallStorage()
    for i in range(12):
        recall.add(f"D1:{i}", "1:56 pm on 8 May, 2023", "Caroline", f"Pottery class number {i}")
    recall.add("D1:99", "1:56 pm on 8 May, 2023", "Melanie", "Camping again")
    box = Toolbox(recall)
    core, archival = CoreMemory("p", "h"), ArchivalStorage(BagEmbedder(), lambda t: len(t.split()))
    first = box.call("conversation_search", {"query": "POTTERY"}, core, archival, "now", [])
    assert first.message.startswith("Showing 5 of 12 results (page 0/2): [")
    assert json.loads(first.message.split(": ", 1)[1])[0] == "timestamp: 1:56 pm on 8 May, 2023, Caroline - Pottery class number 0"
    assert [ids for ids, _ in first.hits] == [["D1:0"], ["D1:1"], ["D1:2"], ["D1:3"], ["D1:4"]]
    last = box.call("conversation_search", {"query": "pottery", "page": "2"}, core, archival, "now", [])
    assert last.message.startswith("Showing 2 of 12 results (page 2/2)")
    assert box.call("conversation_search", {"query": "pottery", "page": 3}, core, archival, "now", []).message \
        == "No results found."
    assert not box.call("conversation_search", {"query": "x", "page": "two"}, core, archival, "now", []).ok
    # a sentence-long query matches nothing (faithful substring search) ...
    assert box.call("conversation_search", {"query": "what class did Caroline take"}, core, archival, "now",
                    []).message == "No results found."
    # ... unless the optional OR-of-keywords flag is on
    anyword = Toolbox(recall, any_keyword=True)
    assert "of 12 results" in anyword.call("conversation_search", {"query": "which pottery class"}, core, archival,
                                           "now", []).message


def test_conversation_search_date_checks_the_format():
    recall = RecallStorage()
    recall.add("D1:1", "1:56 pm on 8 May, 2023", "A", "x")
    recall.add("D2:1", "10:37 am on 27 June, 2023", "B", "y")
    box = Toolbox(recall)
    core, archival = CoreMemory("p", "h"), ArchivalStorage(BagEmbedder(), lambda t: len(t.split()))
    got = box.call("conversation_search_date", {"start_date": "2023-06-01", "end_date": "2023-06-30"},
                   core, archival, "now", [])
    assert got.message.startswith("Showing 1 of 1 results (page 0/0)") and got.hits[0][0] == ["D2:1"]
    bad = box.call("conversation_search_date", {"start_date": "June 1", "end_date": "2023-06-30"},
                   core, archival, "now", [])
    assert not bad.ok and "start_date must be in the format 'YYYY-MM-DD', got 'June 1'" in bad.message
    assert iso_date("1:56 pm on 8 May, 2023") == "2023-05-08" and iso_date("yesterday") is None


def test_archival_chunks_pages_and_keeps_provenance():
    archival = ArchivalStorage(BagEmbedder(), lambda t: len(t.split()), chunk_tokens=4)
    assert archival.insert("one two three four five six seven", "today", ["D1:1", "D1:2"]) == 2
    assert [p["content"] for p in archival.passages] == ["one two three four", "five six seven"]
    box = Toolbox(RecallStorage())
    got = box.call("archival_memory_search", {"query": "six seven"}, CoreMemory("p", "h"), archival, "now", [])
    assert got.message.startswith('Showing 2 of 2 results (page 0/0): ["timestamp: today, memory: five six seven"')
    assert got.hits[0][0] == ["D1:1", "D1:2"]
    clone = archival.clone()
    clone.insert("eight", "later", [])
    assert len(archival.passages) == 2 and archival.matrix.shape[0] == 2  # clones never write back


def test_unknown_function_and_return_truncation():
    box = Toolbox(RecallStorage(), return_char_limit=30)
    core, archival = CoreMemory("p", "h"), ArchivalStorage(BagEmbedder(), lambda t: len(t.split()))
    assert box.call("pause_heartbeats", {}, core, archival, "now", []).message == "No function named pause_heartbeats"
    long = box.call("core_memory_replace", {"name": "human", "old_content": "z" * 50, "new_content": ""},
                    core, archival, "now", [])
    assert not long.ok and len(long.message) == 30
