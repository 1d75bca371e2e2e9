"""Issue 42, poisoned memory cache: an entry of the wrong shape, type, depth or size, with a forged
turn, impossible costs or a checksum that does not match is never used: the run logs a warning,
rebuilds it and replaces it, so later runs load the good one (scgmem/harness/cache_entry.py)."""
from __future__ import annotations

import json
import logging

import pytest

from tests.harness.untrusted_support import DATA, pipeline, small_slice

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")
METHOD = "memgpt"  # cacheable, and its state holds turns (recall entries with dia_id and speaker)


@pytest.fixture(scope="module")
def conversations():
    return small_slice()


@pytest.fixture
def built(tmp_path, conversations):
    """A cache holding one good entry: (cache dir, entry path, entry, the first run's records)."""
    cache = tmp_path / "cache"
    records = pipeline(METHOD, tmp_path / "first", cache_dir=cache).run(conversations)
    [path] = [p for p in (cache / "memory").rglob("*.json")]
    return cache, path, json.loads(path.read_text()), records


def rerun(tmp_path, cache, conversations, name="again"):
    p = pipeline(METHOD, tmp_path / name, cache_dir=cache)
    records = p.run(conversations)
    return p, records


def resigned(entry: dict) -> dict:
    """`entry` with a checksum that matches it again: the forgery must be caught by the other checks."""
    from scgmem.harness.cache_entry import checksum

    return {**entry, "checksum": checksum(entry)}


def nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


POISONS = {
    "state a list": lambda e: resigned({**e, "state": [1, 2, 3]}),
    "state 5000 deep (text)": "[" * 5000 + "]" * 5000,
    "not JSON": '{"format": 1, "state": ',
    "truncated": None,  # filled in from the good entry's text
    "a 50 MB string": lambda e: resigned({**e, "state": {**e["state"], "core": {**e["state"]["core"],
                                                                                  "persona": "x" * (50 << 20)}}}),
    "ingest tokens -1e30": lambda e: resigned({**e, "usage": {"ingest": {**e["usage"]["ingest"],
                                                                          "prompt_tokens": -1e30}}}),
    "ingest tokens 1e13": lambda e: resigned({**e, "usage": {"ingest": {**e["usage"]["ingest"],
                                                                         "prompt_tokens": 10**13}}}),
    "ingest tokens a string": lambda e: resigned({**e, "usage": {"ingest": {"calls": "12"}}}),
    "ingest seconds negative": lambda e: resigned({**e, "ingest_s": -5.0}),
    "a forged turn": lambda e: resigned({**e, "state": {**e["state"], "recall": [
        {**e["state"]["recall"][0], "dia_id": "D99:1"}, *e["state"]["recall"][1:]]}}),
    "a turn given to the other speaker": lambda e: resigned({**e, "state": {**e["state"], "recall": [
        {**e["state"]["recall"][0], "speaker": "Mallory"}, *e["state"]["recall"][1:]]}}),
    "edited without a new checksum": lambda e: {**e, "ingest_s": e["ingest_s"] + 1.0},
    "another method's settings": lambda e: resigned({**e, "settings": {**e["settings"], "chunk_tokens": 1}}),
    "deviations negative": lambda e: resigned({**e, "stats": {**e["stats"], "deviations": {"x": -3}}}),
    "a state the method cannot load": lambda e: resigned({**e, "state": {k: v for k, v in e["state"].items()
                                                                         if k != "recall"}}),
    "deep inside the state": lambda e: resigned({**e, "state": {**e["state"], "now": nested(40)}}),
}


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_poisoned_entry_is_rebuilt_with_a_warning_and_replaced(tmp_path, built, conversations, poison, caplog):
    cache, path, entry, records = built
    make = POISONS[poison]
    text = path.read_text()[: len(path.read_text()) // 2] if make is None else \
        make if isinstance(make, str) else json.dumps(make(entry))
    path.write_text(text)
    with caplog.at_level(logging.WARNING):
        p, again = rerun(tmp_path, cache, conversations)
    assert p.state.cache_hits == 0, "the poisoned entry was used"
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    assert all(n >= 0 for n in p.state.ingest_usage["ingest"].values())
    assert [r["prediction"] for r in again] == [r["prediction"] for r in records]
    # the rebuilt entry replaced it: the next run loads it
    p2, _ = rerun(tmp_path, cache, conversations, name="third")
    assert p2.state.cache_hits == 1


def test_a_good_entry_is_loaded_and_carries_a_checksum(tmp_path, built, conversations):
    from scgmem.harness.cache_entry import checksum

    cache, path, entry, _ = built
    assert entry["checksum"] == checksum(entry)
    p, _ = rerun(tmp_path, cache, conversations)
    assert p.state.cache_hits == 1


def test_an_entry_without_a_checksum_is_rebuilt(tmp_path, built, conversations, caplog):
    """Issue 48: a cache is data we rebuild, not evidence; an entry without a checksum (from before
    issue 42, or stripped after an edit) is rebuilt with a warning, never used."""
    cache, path, entry, _ = built
    path.write_text(json.dumps({k: v for k, v in entry.items() if k != "checksum"}))
    with caplog.at_level(logging.WARNING):
        p, _ = rerun(tmp_path, cache, conversations)
    assert p.state.cache_hits == 0
    assert any("checksum" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert "checksum" in json.loads(path.read_text())  # the rebuilt entry replaced it


def test_a_lock_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path, built, conversations):
    from scgmem.harness.safe_files import UnsafeLink

    cache, path, _, _ = built
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    lock = path.with_name(path.name + ".lock")
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    with pytest.raises(UnsafeLink) as e:
        rerun(tmp_path, cache, conversations)
    assert "\n" not in str(e.value) and ".lock" in str(e.value)
    assert victim.read_text() == "keep me\n"  # filelock would have truncated it
