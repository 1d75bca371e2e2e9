"""Issue 42: a property test per file the harness reads back (predictions.jsonl, usage.jsonl, run.json,
a memory-cache entry), as tests/data/test_loader_fuzz.py is for the data file. A real file written
by the harness is mutated in the ways a file can be wrong (values replaced with odd ones, fields
dropped or added, nesting, lines duplicated, reordered, cut or garbled); the reader either accepts
it, and what it accepts meets the contract the summary relies on, or refuses it in one line (a
cache entry: rebuilt, with a one-line warning). Never another exception.

Fast suite: FAST_CASES per file; `make test-slow`: SLOW_CASES. The distinct refusals (values and
numbers masked) are counted, so a run that reached only one error path fails.
"""
from __future__ import annotations

import copy
import json
import logging
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from tests.harness.untrusted_support import DATA, lines, pipeline, small_slice

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")
FAST_CASES, SLOW_CASES = 200, 3_000
ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([10**13, -10**30, 2**63, 1e30, -1e30]),
                st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from(["", "x" * 70_000, "\x00", "a\nb", "\x1b[31mred", "D99:1", "conv-26", "NaN", "1.0"]),
                st.builds(list), st.builds(dict), st.builds(lambda: [[[[[[[[]]]]]]]]), st.builds(lambda: {"a": {"b": 1}}))


def _places(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _places(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:50]):  # the first elements stand for the rest
            yield from _places(v, prefix + (i,))


def _parent(root, path):
    for step in path[:-1]:
        root = root[step]
    return root


@st.composite
def mutated(draw, value):
    """`value` (a JSON object) with one to three mutations."""
    value = copy.deepcopy(value)
    for _ in range(draw(st.integers(1, 3))):
        places = [p for p in _places(value) if p]
        if not places:
            break
        path = draw(st.sampled_from(places))
        parent = _parent(value, path)
        kind = draw(st.sampled_from(["replace", "replace", "delete", "extra", "nest", "scale"]))
        if kind == "replace":
            parent[path[-1]] = draw(ODD)
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "extra" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "a\nb", "checksum", "format", "run", "data"]))] = draw(ODD)
        elif kind == "nest":
            for _ in range(draw(st.sampled_from([1, 5, 40]))):
                parent[path[-1]] = [parent[path[-1]]]
        elif kind == "scale" and isinstance(parent[path[-1]], (int, float)) and not isinstance(parent[path[-1]], bool):
            parent[path[-1]] = parent[path[-1]] * draw(st.sampled_from([-1, 2, 1000])) + draw(st.sampled_from([0, 1]))
    return value


@st.composite
def mutated_lines(draw, records: list[dict]) -> bytes:
    """A JSON-lines file: some records mutated, lines duplicated, dropped, reordered, garbled or cut."""
    rows = [json.dumps(r) for r in records]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["record", "record", "duplicate", "drop", "swap", "garbage", "cut", "blank"]))
        i = draw(st.integers(0, len(rows) - 1)) if rows else 0
        if not rows:
            break
        if kind == "record" and rows[i].startswith('{"'):  # a record line (not one garbled earlier)
            rows[i] = json.dumps(draw(mutated(json.loads(rows[i]))))
        elif kind == "duplicate":
            rows.insert(draw(st.integers(0, len(rows))), rows[i])
        elif kind == "drop":
            rows.pop(i)
        elif kind == "swap":
            j = draw(st.integers(0, len(rows) - 1))
            rows[i], rows[j] = rows[j], rows[i]
        elif kind == "garbage":
            rows[i] = draw(st.sampled_from(["[", "[]", "null", '"x"', "{", "\x00", "NaN", "[" * 3000, "{}"]))
        elif kind == "blank":
            rows.insert(i, "")
    data = "".join(r + "\n" for r in rows).encode()
    if draw(st.booleans()) and data:  # killed mid-write: the file ends inside a line
        data = data[: draw(st.integers(0, len(data)))]
    return data


def _mask(message: str) -> str:
    text = re.sub(r"/\S+", "<path>", message)
    text = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "<v>", text)
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "<n>", text)


def run_cases(strategy, check, cases: int) -> set[str]:
    """Run `check(case)` on `cases` draws; it returns None (accepted) or the one-line refusal."""
    messages: set[str] = set()

    @settings(max_examples=cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def case(value):
        refusal = check(value)
        if refusal is not None:
            assert "\n" not in refusal and "\r" not in refusal and "\x1b" not in refusal, refusal
            messages.add(_mask(refusal))

    case()
    return messages


# ------------------------------------------------------------------------------- the files

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run (full_context, scripted model) and its conversations."""
    run_dir = tmp_path_factory.mktemp("fuzz") / "run"
    conversations = small_slice()
    p = pipeline("full_context", run_dir)
    p.run(conversations)
    return run_dir, conversations, p.protocol


def predictions_check(finished, tmp):
    from scgmem.harness.pipeline import read_stored_predictions
    from scgmem.harness.untrusted import StoredFileError
    from scgmem.scoring.metrics import aggregate

    _, conversations, protocol = finished
    questions = {(q.sample_id, q.index) for c in conversations for q in c.qa}

    def check(data: bytes):
        path = tmp / "predictions.jsonl"
        path.write_bytes(data)
        try:
            records = read_stored_predictions(tmp, conversations, protocol, 0, 2)
        except StoredFileError as e:
            assert path.read_bytes() == data  # a refusal changes nothing
            return str(e)
        assert data.startswith(path.read_bytes()) and path.read_bytes().count(b"\n") == len(records)
        keys = [(r["sample_id"], r["qa_index"]) for r in records]
        assert len(keys) == len(set(keys)) and set(keys) <= questions
        for r in records:
            assert 0 <= r["f1"] <= 1 and 0 <= r["bleu1"] <= 1 and math.isfinite(r["latency_s"]) and r["latency_s"] >= 0
        if records:
            average = aggregate(records, protocol.categories)["average"]["f1"]
            assert average is None or 0 <= average <= 100
        return None

    return check


def usage_check(tmp, records: int):
    from scgmem.harness.records import UsageLog
    from scgmem.harness.untrusted import StoredFileError

    def check(data: bytes):
        path = tmp / "usage.jsonl"
        path.write_bytes(data)
        try:
            log = UsageLog(path, records=records)
        except StoredFileError as e:
            return str(e)
        assert 0 <= log.prior_questions <= records
        for counts in log.prior_usage.values():
            assert all(isinstance(n, int) and 0 <= n for n in counts.values())
        assert all(isinstance(n, int) and n >= 0 for n in log.prior_deviations.values())
        return None

    return check


def run_json_check(tmp, cfg):
    from scgmem.harness.rundir import RunDirMismatch, check_run_dir
    from scgmem.harness.untrusted import StoredFileError

    def check(record):
        path = tmp / "run.json"
        text = json.dumps(record, allow_nan=True)
        path.write_text(text)
        try:
            check_run_dir(tmp, cfg)
        except (StoredFileError, RunDirMismatch) as e:
            assert path.read_text() == text
            return str(e)
        written = json.loads(path.read_text())
        assert written["config"] and isinstance(written["speed_changes"], list)
        return None

    return check


def cache_check(tmp, entry_path: Path, conv, method, caplog):
    from scgmem.harness.cache import MemoryCache
    from scgmem.harness.pipeline import Pipeline

    cache = MemoryCache(tmp / "cache")

    def check(entry):
        path = cache.root / entry_path.relative_to(entry_path.parents[2])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entry, allow_nan=True))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            loaded = cache.load(path, conv, method.memory_settings())
        if loaded is None:
            [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            return warning
        assert isinstance(loaded["ingest_s"], (int, float)) and 0 <= loaded["ingest_s"] <= 1e7
        assert all(isinstance(n, int) and 0 <= n <= 10**12 for n in loaded["usage"].get("ingest", {}).values())
        fresh = type(method).__new__(type(method))
        fresh.__dict__.update(copy.copy(method.__dict__))
        ok = Pipeline._restore(fresh, loaded, path)  # accepted, or rebuilt with a warning; never raises
        return None if ok else "rejected by the method: rebuilt"

    return check


@pytest.fixture(scope="module")
def cache_entry(tmp_path_factory):
    cache = tmp_path_factory.mktemp("fuzz-cache")
    conversations = small_slice()
    p = pipeline("memgpt", tmp_path_factory.mktemp("fuzz-run"), cache_dir=cache)
    p.run(conversations)
    [path] = list((cache / "memory").rglob("*.json"))
    return path, conversations[0], p.method_factory(p.llm)


def _fuzz(name: str, finished, cache_entry, tmp_path, caplog, cases: int) -> set[str]:
    run_dir, _, _ = finished
    if name == "predictions.jsonl":
        return run_cases(mutated_lines(lines(run_dir / "predictions.jsonl")), predictions_check(finished, tmp_path),
                         cases)
    if name == "usage.jsonl":
        records = len(lines(run_dir / "predictions.jsonl"))
        return run_cases(mutated_lines(lines(run_dir / "usage.jsonl")), usage_check(tmp_path, records), cases)
    if name == "run.json":
        cfg = OmegaConf.create({"method": {"k": 35, "name": "x"}, "seed": 0, "model": {"batch_size": 8}})
        from scgmem.harness.rundir import check_run_dir

        check_run_dir(tmp_path / "base", cfg) if (tmp_path / "base").mkdir() is None else None
        base = json.loads((tmp_path / "base" / "run.json").read_text())
        return run_cases(mutated(base), run_json_check(tmp_path, cfg), cases)
    path, conv, method = cache_entry
    return run_cases(resigned(json.loads(path.read_text())), cache_check(tmp_path, path, conv, method, caplog), cases)


@st.composite
def resigned(draw, entry: dict):
    """A mutated cache entry, most with a checksum that matches it again: the other checks must hold
    without the checksum's help (a forger can compute it too)."""
    from scgmem.harness.cache_entry import checksum

    value = draw(mutated(entry))
    if isinstance(value, dict) and draw(st.integers(0, 3)):
        value["checksum"] = checksum(json.loads(json.dumps(value)))
    return value


FILES = {"predictions.jsonl": 8, "usage.jsonl": 5, "run.json": 5, "cache entry": 8}  # distinct refusals at least


@pytest.mark.parametrize("name", sorted(FILES))
def test_read_back_files_are_accepted_and_meet_the_contract_or_refused_in_one_line(
        name, finished, cache_entry, tmp_path, caplog):
    messages = _fuzz(name, finished, cache_entry, tmp_path, caplog, FAST_CASES)
    assert len(messages) >= FILES[name], sorted(messages)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FILES))
def test_read_back_files_many(name, finished, cache_entry, tmp_path, caplog):
    messages = _fuzz(name, finished, cache_entry, tmp_path, caplog, SLOW_CASES)
    print(f"{name}: {len(messages)} distinct refusals over {SLOW_CASES} cases")
    assert len(messages) >= FILES[name], sorted(messages)
