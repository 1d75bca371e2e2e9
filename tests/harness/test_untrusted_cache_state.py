"""Issue 48: an SCG-Mem memory-cache entry is proven by its content, not its checksum. A forged
entry re-signed with a matching checksum (edges to concepts the schema lacks, a turn of another
conversation in the index, a count of 10**400, N = 0, an extra concept in a turn) is rebuilt with
a warning, and no key outside the schema reaches the predictions or the memory export
(scgmem/core/method.py `check_state`)."""
from __future__ import annotations

import json
import logging

import pytest

from tests.harness.test_untrusted_cache import resigned
from tests.harness.untrusted_support import DATA, pipeline, small_slice

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")


@pytest.fixture(scope="module")
def conversations():
    return small_slice(sessions=1)


def _method(llm):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from scgmem.llm.doubles.fake import BagEmbedder
    from tests.harness.untrusted_support import ROOT

    return instantiate(OmegaConf.load(ROOT / "configs" / "method" / "scgmem.yaml"), llm=llm, embedder=BagEmbedder())


@pytest.fixture(scope="module")
def entry(tiny_llm, conversations):
    """A good entry's state, indexed by hand on the tiny model's tokenizer (no generation): three
    turns, three concepts, edges between them."""
    method = _method(tiny_llm)
    for concept in ("support group", "painting", "camping"):
        method.schema.add(concept)
    turns = conversations[0].turns[:3]
    for turn, concepts in zip(turns, (["support group", "painting"], ["painting", "camping"], [])):
        method._index_turn(turn, concepts)
    return {"state": json.loads(json.dumps(method.state_dict()))}


def _state(entry, **changes):
    return resigned({**entry, "state": {**entry["state"], **changes}})


def _first_concept(entry):
    return entry["state"]["concepts"][0][0]


FORGERIES = {
    "an edge to an unknown concept": lambda e: _state(e, graph={**e["state"]["graph"], "cooc": [
        *e["state"]["graph"]["cooc"], [_first_concept(e), "ghost <b>x</b>", 3]]}),
    "df of an unknown concept": lambda e: _state(e, graph={**e["state"]["graph"], "df": {
        **e["state"]["graph"]["df"], "ghost": 1}}),
    "a count of 10**400": lambda e: _state(e, graph={**e["state"]["graph"], "cooc": [
        [*e["state"]["graph"]["cooc"][0][:2], 10**400], *e["state"]["graph"]["cooc"][1:]]}),
    "N = 0": lambda e: _state(e, graph={**e["state"]["graph"], "n_turns": 0}),
    "an index naming a turn of no conversation": lambda e: _state(e, index={
        **e["state"]["index"], _first_concept(e): ["D99:1"]}),
    "a turn's concept the schema lacks": lambda e: _state(e, turn_concepts={
        **e["state"]["turn_concepts"], next(iter(e["state"]["turn_concepts"])): ["ghost"]}),
    "a concept listed twice": lambda e: _state(e, concepts=e["state"]["concepts"] + e["state"]["concepts"][:1]),
    "a counter of 10**400": lambda e: _state(e, counters={**e["state"]["counters"], "turns": 10**400}),
    "a turn dropped from the turns": lambda e: _state(e, turns=e["state"]["turns"][1:]),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_state_is_refused_by_the_check_and_the_loader(tiny_llm, entry, forgery):
    from scgmem.core.method import check_state

    check_state(entry["state"])  # the good one passes
    forged = FORGERIES[forgery](entry)["state"]
    with pytest.raises(ValueError, match="state"):
        check_state(forged)
    with pytest.raises(ValueError):
        _method(tiny_llm).load_state_dict(forged)


@pytest.mark.slow
def test_a_resigned_forged_entry_is_rebuilt_and_no_key_leaves_the_schema(tmp_path, smollm, conversations, caplog):
    """End to end on the embedded model: the issue's `ghost <b>x</b>` edge, re-signed."""
    cache = tmp_path / "cache"
    pipeline("scgmem", tmp_path / "first", cache_dir=cache, llm=smollm, questions_per_category=1).run(conversations)
    [path] = [p for p in (cache / "memory").rglob("*.json")]
    good = json.loads(path.read_text())
    text = json.dumps(FORGERIES["an edge to an unknown concept"](good))
    path.write_text(text)
    with caplog.at_level(logging.WARNING):
        p = pipeline("scgmem", tmp_path / "again", cache_dir=cache, llm=smollm, questions_per_category=1)
        records = p.run(conversations)
    assert p.state.cache_hits == 0 and any("rebuilding" in r.getMessage() for r in caplog.records)
    assert path.read_text() != text  # replaced by the rebuilt entry
    export = json.loads((tmp_path / "again" / "memory" / f"{conversations[0].sample_id}.json").read_text())
    schema = set(export["concepts"])
    assert all(u in schema and v in schema for u, v, _ in export["edges"])
    for r in records:
        assert set(r.get("seed_keys", [])) <= schema and set(r.get("context_keys", [])) <= schema
        assert "ghost" not in json.dumps(r)
