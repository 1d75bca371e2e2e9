"""A memory-cache entry read back: checked fully before a method loads it, or rebuilt.

An entry (`<cache>/memory/<method>/<key>/<sample_id>.json`, scgmem/harness/cache.py) holds what
ingesting one conversation cost and built: {"format", "ingest_s", "usage", "stats", "settings",
"state", "checksum"}; a session checkpoint (`.partial.json`) has "session" and "rng" instead of
"stats" and "settings". What is checked:

- `checksum`: sha256 over the rest of the entry in canonical JSON, written with it, so a
  truncated or edited file is caught; an entry without one is rebuilt. The checksum is no proof
  against whoever can write the file (they can re-sign it): what proves an entry is the checks
  below and the method's own `load_state_dict` (SCG-Mem's recomputes its index and graph from the
  turns' concepts, scgmem/core/method.py `check_state`);
- size and shape: the file at most MAX_FILE_FACTOR x the conversation's text; nesting at most
  MAX_STATE_DEPTH; every string at most twice the conversation's text (a memory holds the
  conversation and shorter texts made from it); numbers finite;
- ranges: `ingest_s` in [0, 1e7] seconds, token counts in [0, 1e12] (only the "ingest" phase),
  deviation and key counts non-negative integers;
- `settings` equal to the method's `memory_settings()` (the key hashes them: a mismatch is a
  forged or misplaced file);
- turns: any object in the state with a `dia_id` names a turn of this conversation, with its
  speaker; an object shaped like a whole turn must equal it field by field.

An entry failing any check is not loaded: the runner logs a warning and rebuilds it (the rebuilt
entry replaces it). What a method's `load_state_dict` still rejects is rebuilt the same way.
"""
from __future__ import annotations

import hashlib
import json

from scgmem.harness.untrusted import (StoredFileError, depth, need_counts, need_dict, need_int, need_number,
                                      need_usage, walk)

MAX_STATE_DEPTH = 16  # the deepest state written today nests 5 levels
MAX_FILE_FACTOR = 64  # entries written today are 3-5 x the conversation's text
MAX_COUNT = 10**12
TURN_FIELDS = {"dia_id", "speaker", "text", "session", "date_time"}  # dataclasses.asdict(Turn), caption aside


def canonical(entry: dict) -> bytes:
    return json.dumps(entry, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def checksum(entry: dict) -> str:
    """sha256 of `entry` (without its own checksum) in canonical JSON."""
    return hashlib.sha256(canonical({k: v for k, v in entry.items() if k != "checksum"})).hexdigest()


def conversation_chars(conv) -> int:
    return sum(len(t.text) + len(t.caption or "") + len(t.speaker) for t in conv.turns)


def max_file_bytes(conv) -> int:
    return MAX_FILE_FACTOR * conversation_chars(conv) + (1 << 20)


def check_entry(entry, path, conv, *, cache_format: int, settings: dict | None, partial: bool) -> bool:
    """Raise StoredFileError unless `entry` is what the cache writes for `conv` (module docstring).
    `settings`: the method's memory_settings() (None: not compared). Returns True."""
    need_dict(entry, path, "entry")
    if entry.get("format") != cache_format:
        raise StoredFileError(path, "format", entry.get("format"), f"this code reads format {cache_format}")
    if "checksum" not in entry:  # a cache is data we rebuild, not evidence: no checksum, no use
        raise StoredFileError(path, "checksum", None, "missing (an entry from before checksums, or stripped)")
    if entry["checksum"] != checksum(entry):
        raise StoredFileError(path, "checksum", entry["checksum"], "does not match the entry (truncated or edited)")
    need_number(entry.get("ingest_s"), path, "ingest_s", 0.0, 1e7)
    usage = need_usage(entry.get("usage"), path, "usage", MAX_COUNT)
    if set(usage) - {"ingest"}:
        raise StoredFileError(path, "usage", sorted(usage), "holds only the 'ingest' phase")
    if partial:
        need_int(entry.get("session"), path, "session", 0, 10**6)
        need_dict(entry.get("rng"), path, "rng")
    else:
        stats = need_dict(entry.get("stats"), path, "stats")
        need_counts(stats.get("deviations") or {}, path, "stats.deviations", MAX_COUNT)
        for key in ("keys_generated", "keys_outside_schema"):
            if key in stats:
                need_int(stats[key], path, f"stats.{key}", 0, MAX_COUNT)
        if settings is not None and json.loads(json.dumps(settings, default=str)) != entry.get("settings"):
            raise StoredFileError(path, "settings", entry.get("settings"), "not this method's memory settings")
    state = need_dict(entry.get("state"), path, "state")
    if depth(state, MAX_STATE_DEPTH) > MAX_STATE_DEPTH:
        raise StoredFileError(path, "state", "...", f"nested deeper than {MAX_STATE_DEPTH}")
    _check_values(entry, path, conv)
    return True


def _check_values(entry: dict, path, conv) -> None:
    """Strings bounded by the conversation's size, numbers finite, turns the conversation's own."""
    turns = {t.dia_id: t for t in conv.turns}
    max_str = 2 * conversation_chars(conv) + (1 << 16)
    for where, value in walk(entry):
        if isinstance(value, str) and len(value) > max_str:
            raise StoredFileError(path, where, f"{len(value)} characters", f"longer than this conversation "
                                  f"could give ({max_str})")
        if isinstance(value, float) and value != value:  # parse_json refuses NaN; an entry built in memory too
            raise StoredFileError(path, where, value, "must be a finite number")
        if isinstance(value, dict) and "dia_id" in value and where.startswith("state"):
            dia_id = value["dia_id"]
            if dia_id is None:
                continue
            turn = turns.get(dia_id) if isinstance(dia_id, str) else None
            if turn is None:
                raise StoredFileError(path, f"{where}.dia_id", dia_id, f"not a turn of {conv.sample_id}")
            if "speaker" in value and value["speaker"] != turn.speaker:
                raise StoredFileError(path, f"{where}.speaker", value["speaker"], f"{dia_id} is {turn.speaker!r}'s")
            if TURN_FIELDS <= set(value):
                for name in (*sorted(TURN_FIELDS), "caption"):
                    if name in value and value[name] != getattr(turn, name):
                        raise StoredFileError(path, f"{where}.{name}", value[name],
                                              f"differs from turn {dia_id} of {conv.sample_id}")
