"""Field rules for merging shards of one run: what must agree, what adds up."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from scgmem.harness.rundir import comparable_settings

# Summary fields that fix what a number means; shards must agree on every one of them.
SAME_FIELDS = ("method", "model", "protocol", "protocol_settings", "seed", "category_mapping", "versions")
# Inside "generation": per call kind, how often it ran and which values it saw add up; its settings,
# the chat template and the cap profile must agree (the caps themselves are the config's method and
# protocol values, compared as settings). The template probe renders the shard's first prompt.
GENERATION_TALLIES = ("calls", "max_new_tokens", "temperature", "stop")
# A call kind's request settings: the first seen, then any other (scgmem/llm/usage.py). The protocol
# varies these two per question (category 5's temperature), so question shards with different
# category mixes see different sets; they are tallied above and compared through the config.
PER_QUESTION = ("temperature", "max_tokens")
# A served run's tallies inside "server" and its "pool": summed (requests), the largest (peak in
# flight) or united (servers found dead); the rest of "server" fixes the engine and must agree.
SERVER_TALLIES = ("constrained_requests",)
POOL_TALLIES = ("requests", "peak_in_flight", "dead")
# How a shard reached its servers, not what they computed (the config's ignores them too,
# scgmem/harness/rundir.py IGNORED): one server per GPU, each shard with its own address and limit.
SERVER_REACH = ("max_in_flight",)
POOL_REACH = ("servers", "max_in_flight")
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
    """The config settings that must agree: those a resumed run must keep (scgmem/harness/rundir.py:
    cache folders, progress bars and the logger may differ), but data.samples."""
    settings = comparable_settings(summary.get("config") or {})
    settings.pop("data.samples", None)
    return settings


def _first_difference(a, b, where: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = _first_difference(a.get(key), b.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    return None if a == b else where


def _generation_settings(generation) -> tuple[dict, dict]:
    """The part of a summary's "generation" that fixes what an output means: (the report without its
    calls and template probe, {call kind: its settings without the tallies})."""
    if not isinstance(generation, dict):
        return {"generation": generation}, {}
    fixed = {k: v for k, v in generation.items() if k not in ("calls", "static_decode")}  # those are tallies
    if isinstance(fixed.get("chat_template"), dict):
        fixed["chat_template"] = {k: v for k, v in fixed["chat_template"].items() if k not in TEMPLATE_PROBE}
    if isinstance(fixed.get("server"), dict):
        fixed["server"] = {k: v for k, v in fixed["server"].items() if k not in SERVER_TALLIES + SERVER_REACH}
        if isinstance(fixed["server"].get("pool"), dict):
            fixed["server"]["pool"] = {k: v for k, v in fixed["server"]["pool"].items()
                                       if k not in POOL_TALLIES + POOL_REACH}
    kinds = {kind: {**{k: v for k, v in call.items() if k not in GENERATION_TALLIES + ("settings", "other_settings")},
                    "settings": sorted({json.dumps({k: v for k, v in seen.items() if k not in PER_QUESTION}, sort_keys=True)
                                        for seen in _seen_settings(call)})}
             for kind, call in (generation.get("calls") or {}).items()}
    return fixed, kinds


def _seen_settings(call: dict) -> list[dict]:
    return [seen for seen in [call.get("settings"), *(call.get("other_settings") or [])] if isinstance(seen, dict)]


def ingest_side(summary: dict) -> dict:
    """The fields of a summary that describe building its memories, not answering: question shards
    of one command (run.question_shard) share them, so a merge counts them once per conversation set."""
    keys = {"generated": 0, "outside_schema": 0}
    deviations: dict = {}
    for stats in ((summary.get("method_stats") or {}).get("ingest") or {}).values():
        keys["generated"] += int(stats.get("keys_generated", 0))
        keys["outside_schema"] += int(stats.get("keys_outside_schema", 0))
        deviations = add_numbers([deviations, stats.get("deviations") or {}])  # answering adds its own after
    return {"timing": {"ingest_s": (summary.get("timing") or {}).get("ingest_s", 0)},
            "tokens": {"ingest": (summary.get("tokens") or {}).get("ingest") or {}},
            "deviations": deviations,
            "structural_hallucination_counts": keys if summary.get("structural_hallucination_counts") else {}}


def subtract_numbers(total: dict, part: dict) -> dict:
    """`total` with the numeric leaves of `part` taken away (the inverse of add_numbers)."""
    out = copy.deepcopy(total)
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = subtract_numbers(out[key], value)
        elif isinstance(value, (int, float)) and isinstance(out.get(key), (int, float)):
            out[key] = out[key] - value
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
                    seen = {json.dumps(v): v for v in mine + theirs}  # values may be unhashable (stop lists)
                    calls[kind][key] = [seen[k] for k in sorted(seen)]
            settings = {json.dumps(v, sort_keys=True): v for v in _seen_settings(calls[kind]) + _seen_settings(call)}
            others = [v for v in settings.values() if v != calls[kind].get("settings")]
            if others:
                calls[kind]["other_settings"] = others
    merged["calls"] = dict(sorted(calls.items()))
    servers = [r["server"] for r in reports if isinstance(r.get("server"), dict)]
    if servers and isinstance(merged.get("server"), dict):
        for key in SERVER_TALLIES:
            if all(isinstance(v.get(key), int) for v in servers):
                merged["server"][key] = sum(v[key] for v in servers)
        pools = [v["pool"] for v in servers if isinstance(v.get("pool"), dict)]
        if pools and isinstance(merged["server"].get("pool"), dict):
            pool = merged["server"]["pool"]
            if all(isinstance(q.get("requests"), int) for q in pools):
                pool["requests"] = sum(q["requests"] for q in pools)
            if all(isinstance(q.get("peak_in_flight"), int) for q in pools):
                pool["peak_in_flight"] = max(q["peak_in_flight"] for q in pools)
            if all(isinstance(q.get("dead"), list) for q in pools):
                pool["dead"] = sorted({json.dumps(d): d for q in pools for d in q["dead"]}.values(), key=json.dumps)
            if all(isinstance(q.get("servers"), list) for q in pools):  # every shard's, in shard order
                pool["servers"] = list({json.dumps(u): u for q in pools for u in q["servers"]}.values())
    decodes = [r["static_decode"] for r in reports if isinstance(r.get("static_decode"), dict)]
    if decodes:  # scgmem/llm/local/static_decode.py: batches and compiled graphs add up, shapes unite
        merged["static_decode"] = {
            "compile": decodes[0].get("compile"), "batches": sum(d.get("batches") or 0 for d in decodes),
            "shapes": sorted({tuple(s) for d in decodes for s in d.get("shapes") or []}),
            "compiled_graphs": (None if any(d.get("compiled_graphs") is None for d in decodes)
                                else sum(d["compiled_graphs"] for d in decodes))}
        merged["static_decode"]["shapes"] = [list(s) for s in merged["static_decode"]["shapes"]]
    return merged


def answer_temperatures(config: dict) -> set[float] | None:
    """The answer temperatures a run's protocol config allows (one for every category, or categories
    1-4 and category 5's own); None when the protocol names none."""
    protocol = config.get("protocol") if isinstance(config.get("protocol"), dict) else {}
    if protocol.get("temperature") is not None:
        return {float(protocol["temperature"])}
    allowed = {protocol.get(k) for k in ("base_temperature", "cat5_temperature")} - {None}
    return {float(t) for t in allowed} if allowed else None


def check_call_log(path: Path, summary: dict, error: type[Exception]) -> None:
    """Per-question settings (category 5's temperature) are left out of the comparison between shards,
    which see different category mixes: each shard's are checked against its own call log instead.
    Every temperature its answer calls ran at (summary.json `generation.calls`) must be one its
    protocol config allows; an edited config or an edited tally is refused in one line."""
    allowed = answer_temperatures(summary.get("config") or {})
    calls = (summary.get("generation") or {}).get("calls") if isinstance(summary.get("generation"), dict) else None
    if allowed is None or not isinstance(calls, dict):
        return
    for kind, call in sorted(calls.items()):
        if not str(kind).startswith("answer/") or not isinstance(call, dict):
            continue
        for t in call.get("temperature") or []:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or float(t) not in allowed:
                raise error(f"{path / 'summary.json'}: field generation.calls.{kind}.temperature: {t!r} is not a "
                            f"temperature its config.protocol allows ({sorted(allowed)}): the settings and the call "
                            "log disagree")


def check_same_settings(shards: list[tuple[Path, dict]], error: type[Exception]) -> None:
    """Raise `error` naming the file and the first field where a shard differs from the first, or
    where a shard's per-question settings contradict its own call log (`check_call_log`)."""
    for path, summary in shards:
        check_call_log(path, summary, error)
    first_path, first = shards[0]
    for path, summary in shards[1:]:
        for field in SAME_FIELDS:
            where = _first_difference(first.get(field), summary.get(field), field)
            if where:
                raise error(f"{path / 'summary.json'}: field {where} differs from {first_path / 'summary.json'}")
        (mine, my_kinds), (theirs, their_kinds) = (_generation_settings(s.get("generation"))
                                                   for s in (first, summary))
        # A kind only one shard called is no conflict: a shard whose memories all came from the
        # cache made no ingest calls.
        where = _first_difference(mine, theirs, "generation") or _first_difference(
            {k: v for k, v in my_kinds.items() if k in their_kinds},
            {k: v for k, v in their_kinds.items() if k in my_kinds}, "generation.calls")
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
    for s in summaries:  # question shards of one conversation name it once
        samples.extend(x for x in (s.get("data") or {}).get("samples") or [] if x not in samples)
        turns.update((s.get("data") or {}).get("ingested_turns") or {})
    data["samples"] = samples
    if turns:
        data["ingested_turns"], data["ingested_turns_total"] = turns, sum(turns.values())
    return data
