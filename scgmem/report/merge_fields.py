"""Field rules for merging shards of one run: what must agree, what adds up."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from scgmem.harness.rundir import IGNORED

# Summary fields that fix what a number means; shards must agree on every one of them.
SAME_FIELDS = ("method", "model", "protocol", "protocol_settings", "seed", "category_mapping", "versions")
# Inside "generation": per call kind, how often it ran and which values it saw add up; its settings,
# the chat template and the caps must agree. The template probe renders the shard's first prompt.
GENERATION_TALLIES = ("calls", "max_new_tokens", "temperature", "stop")
TEMPLATE_PROBE = ("probe", "probe_sha256")


def add_numbers(parts: list[dict]) -> dict:
    """Sum numeric leaves of nested dicts; a non-numeric leaf keeps its first value."""
    out: dict = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                out[key] = add_numbers([out.get(key) or {}, value])
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                prior = out.get(key, 0)
                out[key] = prior + value if isinstance(prior, (int, float)) else value
            else:
                out.setdefault(key, value)
    return out


def _config_without_samples(summary: dict) -> dict:
    """The config fields that must agree: all but data.samples and the settings a resumed run may
    change too (scgmem/harness/rundir.py IGNORED: cache folders, progress bars, the logger)."""
    config = copy.deepcopy(summary.get("config") or {})
    (config.get("data") or {}).pop("samples", None)
    for path in IGNORED:
        parent = config
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return config


def _first_difference(a, b, where: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = _first_difference(a.get(key), b.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    return None if a == b else where


def _generation_settings(generation) -> dict:
    """The part of a summary's "generation" that fixes what an output means (kinds a shard never
    called are left out: a shard whose memories all came from the cache made no ingest calls)."""
    if not isinstance(generation, dict):
        return {"generation": generation}
    out = {k: v for k, v in generation.items() if k != "calls"}
    if isinstance(out.get("chat_template"), dict):
        out["chat_template"] = {k: v for k, v in out["chat_template"].items() if k not in TEMPLATE_PROBE}
    for kind, call in (generation.get("calls") or {}).items():
        out[f"calls.{kind}"] = {k: v for k, v in call.items() if k not in GENERATION_TALLIES}
    return out


def merged_generation(summaries: list[dict]) -> dict | None:
    """The first shard's generation report with every shard's call kinds: counts summed, the values
    seen (max_new_tokens, temperature, stop) united."""
    reports = [s["generation"] for s in summaries if isinstance(s.get("generation"), dict)]
    if not reports:
        return None
    merged = copy.deepcopy(reports[0])
    calls = merged.setdefault("calls", {})
    for report in reports[1:]:
        for kind, call in (report.get("calls") or {}).items():
            if kind not in calls:
                calls[kind] = copy.deepcopy(call)
                continue
            for key in GENERATION_TALLIES:
                mine, theirs = calls[kind].get(key), call.get(key)
                if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
                    calls[kind][key] = mine + theirs
                elif isinstance(mine, list) and isinstance(theirs, list):
                    calls[kind][key] = sorted({json.dumps(v) for v in mine + theirs}, key=str)
                    calls[kind][key] = [json.loads(v) for v in calls[kind][key]]
    merged["calls"] = dict(sorted(calls.items()))
    return merged


def check_same_settings(shards: list[tuple[Path, dict]], error: type[Exception]) -> None:
    """Raise `error` naming the file and the first field where a shard differs from the first."""
    first_path, first = shards[0]
    for path, summary in shards[1:]:
        for field in SAME_FIELDS:
            where = _first_difference(first.get(field), summary.get(field), field)
            if where:
                raise error(f"{path / 'summary.json'}: field {where} differs from {first_path / 'summary.json'}")
        mine, theirs = _generation_settings(first.get("generation")), _generation_settings(summary.get("generation"))
        shared = {k for k in mine if k in theirs or not k.startswith("calls.")} | \
            {k for k in theirs if not k.startswith("calls.")}
        where = _first_difference({k: mine.get(k) for k in shared}, {k: theirs.get(k) for k in shared}, "generation")
        if where:
            raise error(f"{path / 'summary.json'}: field {where} differs from {first_path / 'summary.json'}")
        where = _first_difference(_config_without_samples(first), _config_without_samples(summary), "config")
        if where:
            raise error(f"{path / 'summary.json'}: field {where} differs from {first_path / 'summary.json'}")


def merged_data_info(summaries: list[dict]) -> dict:
    """The first shard's data block with the union of samples (in shard order) and of their turn counts."""
    data = copy.deepcopy(summaries[0].get("data") or {})
    samples: list[str] = []
    turns: dict[str, int] = {}
    for s in summaries:
        samples.extend((s.get("data") or {}).get("samples") or [])
        turns.update((s.get("data") or {}).get("ingested_turns") or {})
    data["samples"] = samples
    if turns:
        data["ingested_turns"], data["ingested_turns_total"] = turns, sum(turns.values())
    return data
