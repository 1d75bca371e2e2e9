"""Schema evolution (Section 3.4): parsing and validation of free output, the trigger rule,
assimilation under the constraint, and the evolution=false ablation."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from scgmem.core.concepts import grounding_words, normalise, parse_list, rejection, surface
from scgmem.core.evolution import Evolution, TurnConcepts
from scgmem.core.schema import CognitiveSchema
from tests.core.conftest import make_conversation

# ---------------------------------------------------------------------- concepts


def test_parse_list_handles_the_formats_small_models_write():
    assert parse_list("hiking, lake ,  Camping trip") == ["hiking", "lake", "Camping trip"]
    assert parse_list("Keywords: 1. LGBTQ support group\n2. Caroline's talk; the painting.") == [
        "LGBTQ support group", "Caroline's talk", "the painting"]
    assert parse_list("- Painting: a lake at sunrise\n- \n*  kids") == ["Painting", "a lake at sunrise", "kids"]
    assert parse_list("") == [] and parse_list(",,, \n ;") == []
    assert parse_list("hike, lake, dog, cat", max_items=2) == ["hike", "lake"]


def test_normalise():
    assert normalise("  LGBTQ   Support group! ") == "lgbtq support group"
    assert normalise('"The Transgender stories."') == "transgender stories"
    assert surface("  my Pottery class ") == "Pottery class"
    assert normalise("the") == ""


@pytest.mark.parametrize("candidate, reason", [
    ("", "empty"), ("!!", "empty"), ("the and of", "stop_words"), ("2023", "number"), ("7 8", "number"),
    ("one two three four five", "too_long"), ("skydiving", "ungrounded"), ("pottery class", None),
    ("Pottery", None), ("paintings", None), ("Caroline", None), ("lake sunrise", None),
])
def test_rejection_reasons(candidate, reason):
    grounding = grounding_words("Caroline's pottery class: I painted a lake sunrise, one two three four five",
                                "a painting of 7 8 and 2023")
    assert rejection(candidate, grounding) == reason


# ---------------------------------------------------------------------- evolution on the tiny model


def texts():
    return ["I love hiking near the lake", "The lake was cold but hiking was fun", "We tried pottery class today",
            "Pottery and hiking are my hobbies", "My dog loves the lake", "Hiking with my dog again"]


def words_script(prompt):
    """Free generation: every content word of the message (already grounded)."""
    message = prompt.rsplit("Message:", 1)[1]
    found = re.findall(r"[A-Za-z]+", message.split("<|im_end|>")[0])
    return ", ".join(w for w in found if len(w) > 3)


def test_first_batch_accommodates_everything(hybrid):
    llm = hybrid(words_script)
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    evo = Evolution(llm, schema)
    conv = make_conversation(texts()[:2])
    results = evo.process(conv.turns)
    assert all(r.accommodated and not r.assimilated for r in results)  # S was empty
    assert {"love", "hiking", "lake"} <= set(results[0].concepts)
    assert "lake" in results[1].concepts  # already in S from the first turn: kept (evolution=True)
    assert set(schema.concepts) == {c for r in results for c in r.concepts}
    assert evo.counters["turns"] == 2 and evo.counters["accommodated_turns"] == 2


def test_assimilation_keeps_only_schema_keys_and_counts_them(hybrid):
    llm = hybrid(words_script)
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    for c in ("hiking", "lake", "pottery", "dog"):
        schema.add(c)
    counters = Counter()
    # thresholds so low that the tiny random model's keys are all kept and nothing triggers
    evo = Evolution(llm, schema, threshold_mode="absolute", keep_threshold=-1e9, trigger_threshold=-1e9, max_keys=3, counters=counters)
    conv = make_conversation(texts())
    results = evo.process(conv.turns)
    assert counters["keys_generated"] > 0 and counters["keys_outside_schema"] == 0
    for r in results:
        assert r.assimilated and set(r.assimilated) <= {"hiking", "lake", "pottery", "dog"}
        assert len(r.assimilated) <= 3 and not r.accommodated
    assert len(schema) == 4 and not llm.free_prompts  # no accommodation was needed
    # with a strict threshold every turn accommodates
    strict = Evolution(llm, schema, threshold_mode="absolute", keep_threshold=0.0, counters=Counter())
    assert all(r.accommodated for r in strict.process(conv.turns))


def test_trigger_rule():
    evo = Evolution.__new__(Evolution)
    evo.evolution, evo.min_assimilated, evo.trigger_threshold = True, 2, -3.0
    evo.threshold_mode = "absolute"
    evo.schema = ["x"]  # non-empty
    assert evo.needs_accommodation(TurnConcepts("D1:1", ["a"], mean_logprob=-1.0))  # too few kept
    assert evo.needs_accommodation(TurnConcepts("D1:1", ["a", "b"], mean_logprob=-3.5))  # high perplexity
    assert evo.needs_accommodation(TurnConcepts("D1:1", ["a", "b"]))  # NaN (nothing tracked)
    assert not evo.needs_accommodation(TurnConcepts("D1:1", ["a", "b"], mean_logprob=-2.0))
    evo.schema = []
    assert evo.needs_accommodation(TurnConcepts("D1:1", ["a", "b"], mean_logprob=-1.0))  # S empty


def test_malformed_output_never_crashes_and_is_counted(hybrid):
    outputs = iter(["", "1.\n2.\n3.", "the, and, of", "skydiving, 2023, " + "x " * 30, "Ünïcode ✓, lake!!!"])
    llm = hybrid(lambda p: next(outputs))
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    evo = Evolution(llm, schema, max_free_keys=8)
    conv = make_conversation(texts()[:5])
    results = evo.process(conv.turns)
    c = evo.counters
    assert c["accommodation_unparseable"] == 1 and c["accommodation_dropped_stop_words"] == 3
    assert c["accommodation_dropped_number"] == 4  # "1", "2", "3", "2023"
    assert c["accommodation_dropped_ungrounded"] == 2 and c["accommodation_dropped_too_long"] == 1
    assert results[4].concepts == ["lake"] and c["turns_without_concepts"] == 4


def test_evolution_false_never_grounds_a_turn_in_an_existing_concept(hybrid):
    llm = hybrid(words_script)
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    evo = Evolution(llm, schema, evolution=False, threshold_mode="absolute", keep_threshold=-1e9, trigger_threshold=-1e9, counters=Counter())
    conv = make_conversation(texts() * 2)
    seen: set[str] = set()
    for start in range(0, len(conv.turns), 3):
        before = set(schema.concepts)
        for r in evo.process(conv.turns[start:start + 3]):
            assert not r.assimilated and r.accommodated
            assert not set(r.concepts) & before, "a turn was grounded in a concept that existed before its batch"
            assert not set(r.concepts) & seen, "a turn was grounded in a concept of an earlier turn of its batch"
            seen |= set(r.concepts)
    assert evo.counters["accommodation_dropped_existing"] > 0  # "lake", "hiking" came back and were dropped
    assert evo.counters["keys_generated"] == 0  # no assimilation at all
