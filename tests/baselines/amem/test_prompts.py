"""A-MEM's reply parsers and fallback heuristics (baselines/amem/prompts.py)."""
from __future__ import annotations

import pytest

from scgmem.baselines.amem import prompts as P


def test_parse_analysis_json_sections_and_none():
    result, how = P.parse_analysis('{"keywords": ["hiking", "lake"], "context": "Outdoor trip.", "tags": "travel, fun"}')
    assert how == "json" and result == {"keywords": ["hiking", "lake"], "context": "Outdoor trip.",
                                        "tags": ["travel", "fun"]}
    result, how = P.parse_analysis("Sure.\nKEYWORDS: - hiking\n- lake\nCONTEXT: Outdoor trip.\nTAGS: travel, fun")
    assert how == "sections" and result["keywords"] == ["hiking", "lake"] and result["tags"] == ["travel", "fun"]
    assert result["context"] == "Outdoor trip."
    result, how = P.parse_analysis("Carolinesays: I went to a support group.")
    assert how == "none" and result == {"keywords": [], "context": "", "tags": []}


def test_heuristics_prefer_capitalised_non_stop_words():
    content = "Speaker Carolinesays : I went to the LGBTQ support group and it was powerful."
    assert P.heuristic_keywords(content)[:2] == ["carolinesays", "lgbtq"]
    assert "the" not in P.heuristic_keywords(content) and len(P.heuristic_keywords(content)) == 5
    assert P.heuristic_context("First one. Second one.") == "First one."
    assert P.heuristic_context("no full stop") == "no full stop"


@pytest.mark.parametrize("reply,expected", [
    ('{"should_evolve": true, "actions": ["strengthen", "update_neighbor"]}', ("STRENGTHEN_AND_UPDATE", "json")),
    ('{"should_evolve": false, "actions": ["strengthen"]}', ("NO_EVOLUTION", "json")),
    ('{"should_evolve": "True", "actions": ["update_neighbor"]}', ("UPDATE_NEIGHBOR", "json")),
    ("DECISION: STRENGTHEN\nREASON: related", ("STRENGTHEN", "section")),
    ("decision: update neighbor", ("UPDATE_NEIGHBOR", "section")),
    ("I think we should strengthen the links.", ("STRENGTHEN", "inferred")),
    ("Maybe strengthen and update both.", ("STRENGTHEN_AND_UPDATE", "inferred")),
    ("", ("NO_EVOLUTION", "unparsed")),
    ("The memory is about painting.", ("NO_EVOLUTION", "unparsed")),
])
def test_parse_decision(reply, expected):
    assert P.parse_decision(reply) == expected


def test_parse_strengthen_and_neighbour_updates():
    assert P.parse_strengthen("CONNECTIONS: 0, 2, x, 7\nTAGS: art, lake") == ([0, 2, 7], ["art", "lake"], "sections")
    assert P.parse_strengthen('{"suggested_connections": [1, "3"], "tags_to_update": ["a"]}') == ([1, 3], ["a"], "json")
    assert P.parse_strengthen("nothing useful") == ([], [], "none")
    updates, how = P.parse_neighbour_updates(
        "NEIGHBOR 0:\nCONTEXT: new zero\nTAGS: a, b\n\nNEIGHBOR 2:\nCONTEXT: new two\nTAGS: c", 3)
    assert how == "sections"
    assert updates == [{"context": "new zero", "tags": ["a", "b"]}, {"context": "", "tags": []},
                       {"context": "new two", "tags": ["c"]}]
    updates, how = P.parse_neighbour_updates('{"new_context_neighborhood": ["x"], "new_tags_neighborhood": [["t"]]}', 2)
    assert how == "json" and updates == [{"context": "x", "tags": ["t"]}, {"context": "", "tags": []}]
    assert P.parse_neighbour_updates("garbage", 2) == ([{"context": "", "tags": []}] * 2, "none")


def test_parse_query_keywords():
    assert P.parse_query_keywords('{"keywords": "adoption, agency"}') == "adoption, agency"
    assert P.parse_query_keywords('{"keywords": ["adoption", "agency"]}') == "adoption, agency"
    assert P.parse_query_keywords("  adoption, agency ") == "adoption, agency"
    assert P.parse_query_keywords("") == ""
