"""Category 5 apart (scgmem/scoring/cat5.py): the refusal rule, the kinds of answers, the 1-4 average."""
from __future__ import annotations

import pytest

from scgmem.scoring.cat5 import (NOTES, adversarial_stats, answer_kind, average_1_4, says_not_mentioned,
                                 summary_fields)
from scgmem.scoring.protocols import NOT_MENTIONED

CATS = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}


def rec(category, prediction="", f1=0.0, bleu1=0.0, trap="self-care is important", first_not_mentioned=True):
    options = [NOT_MENTIONED, trap] if first_not_mentioned else [trap, NOT_MENTIONED]
    return {"category": category, "prediction": prediction, "f1": f1, "bleu1": bleu1,
            **({"options": options} if category == 5 else {})}


@pytest.mark.parametrize("text, expected", [
    ("Not mentioned in the conversation", True),
    ("It is NOT MENTIONED.", True),
    ("No information available", True),
    ("not in the conversation", False),  # LoCoMo's rule knows two phrases only
    ("self-care is important", False),
])
def test_refusal_rule_is_locomos(text, expected):
    assert says_not_mentioned(text) is expected


@pytest.mark.parametrize("answer, kind", [
    ("Self-care is important.", "trap_exact"),
    ('"self-care is important"', "trap_exact"),
    ("Not mentioned in the conversation or self-care is important", "both_options"),
    ("She realized self-care is important", "trap_inside"),
    ("Not mentioned in the conversation", "refusal_only"),
    ("running", "other"),
    ("self-care is importantly", "other"),  # whole words only
])
def test_answer_kinds(answer, kind):
    assert answer_kind(answer, "self-care is important") == kind


def test_stats_count_each_kind_and_the_f1_they_supply():
    records = [rec(5, "self-care is important", f1=1.0), rec(5, NOT_MENTIONED + " or self-care is important", f1=0.5),
               rec(5, NOT_MENTIONED, f1=0.0), rec(5, NOT_MENTIONED, f1=0.0), rec(1, "x", f1=1.0)]
    s = adversarial_stats(records, "amem")
    assert s["n"] == 4 and s["n_with_trap"] == 4
    assert s["refusal_rate"] == pytest.approx(3 / 4)  # both-options answers count, as in LoCoMo's code
    assert s["trap_exact_rate"] == pytest.approx(1 / 4)
    assert s["both_options_rate"] == pytest.approx(1 / 4)
    assert s["trap_repeat_rate"] == pytest.approx(2 / 4)
    assert s["refusal_only_rate"] == pytest.approx(2 / 4)
    assert s["f1_share"]["trap_exact"] == pytest.approx(1.0 / 1.5)
    assert s["mean_f1_by_kind"]["both_options"] == pytest.approx(50.0)
    assert adversarial_stats([rec(1)], "amem") is None


def test_locomo_letters_are_mapped_before_the_rule():
    """protocol=locomo shows (a)/(b); LoCoMo's scorer maps a one-letter answer to its option."""
    a_is_refusal = rec(5, "(a)", first_not_mentioned=True)
    a_is_trap = rec(5, "a", first_not_mentioned=False)
    s = adversarial_stats([a_is_refusal, a_is_trap], "locomo")
    assert s["refusal_rate"] == pytest.approx(0.5) and s["counts"]["trap_exact"] == 1
    assert adversarial_stats([a_is_refusal], "amem")["refusal_rate"] == 0.0  # amem shows no letters


def test_a_trap_that_is_itself_not_mentioned_is_left_out_of_the_trap_numbers():
    """Two items of locomo10.json have adversarial_answer "Not mentioned": no trap to repeat."""
    s = adversarial_stats([rec(5, NOT_MENTIONED, trap="Not mentioned"), rec(5, "x")], "amem")
    assert s["n"] == 2 and s["n_with_trap"] == 1 and s["refusal_rate"] == pytest.approx(0.5)
    assert s["counts"]["other"] == 1


def test_average_1_4_leaves_category_5_out():
    records = [rec(1, f1=0.2), rec(2, f1=0.4), rec(2, f1=0.0), rec(4, f1=0.6, bleu1=0.3), rec(5, f1=1.0)]
    avg = average_1_4(records, CATS)
    assert avg["categories"] == [1, 2, 4]
    assert avg["f1"] == pytest.approx(100 * (0.2 + 0.2 + 0.6) / 3)
    assert avg["overall_weighted"]["f1"] == pytest.approx(100 * 1.2 / 4) and avg["overall_weighted"]["n"] == 4
    assert average_1_4(records[-1:], {5: "adversarial"}) is None


def test_summary_fields_carry_a_note_for_every_number():
    fields = summary_fields([rec(1, f1=1.0), rec(5, NOT_MENTIONED)], CATS, "amem")
    assert fields["average_1_4"]["note"] == NOTES["average_1_4"]
    for key in ("refusal_rate", "trap_exact_rate", "both_options_rate", "trap_repeat_rate"):
        assert key in fields["category5"] and fields["category5"]["notes"][key]
    assert summary_fields([rec(1)], {1: "multi_hop"}, "amem")["category5"] is None
