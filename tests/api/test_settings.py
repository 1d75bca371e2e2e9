"""The checks of a method's settings (scgmem/api/settings.py): one message form,
`method.<name> must be <what>, got <value>`, and the value back when it is good."""
from __future__ import annotations

import pytest

from scgmem.api.settings import (check_bool, check_choice, check_embedder, check_int, check_positive, check_range,
                                 check_slot, setting_error)


def test_good_values_come_back_unchanged():
    assert check_int("k", 5) == 5 and check_int("hops", 0, 0) == 0 and check_int("cap", None, 0, allow_none=True) is None
    assert check_positive("temperature", 0.5) == 0.5 and check_positive("n", 3) == 3
    assert check_range("q", 0, 0, 1) == 0 and check_range("q", 1.0, 0, 1) == 1.0
    assert check_choice("mode", "b", ("a", "b")) == "b"
    assert check_bool("constraint", False) is False
    assert check_slot("prompt", "Q: {question}", "{question}") == "Q: {question}"
    check_embedder("rag", object())


@pytest.mark.parametrize("call, message", [
    (lambda: check_int("k", 0), "method.k must be a positive int, got 0"),
    (lambda: check_int("k", True), "method.k must be a positive int, got True"),  # a bool is not a count
    (lambda: check_int("k", 2.0), "method.k must be a positive int, got 2.0"),
    (lambda: check_int("hops", -1, 0), "method.hops must be an int >= 0, got -1"),
    (lambda: check_int("cap", -1, 0, allow_none=True), "method.cap must be None or an int >= 0, got -1"),
    (lambda: check_positive("temperature", 0), "method.temperature must be > 0, got 0"),
    (lambda: check_positive("temperature", "hot"), "method.temperature must be > 0, got 'hot'"),
    (lambda: check_range("q", 1.5, 0, 1), r"method.q must be in \[0, 1\], got 1.5"),
    (lambda: check_range("f", 1, 0, 1, open_low=True, open_high=True), r"method.f must be in \(0, 1\), got 1"),
    (lambda: check_range("f", 0, 0, 1, open_low=True), r"method.f must be in \(0, 1\], got 0"),
    (lambda: check_range("start", 700, 0, 600, high_name="word_limit"),
     r"method.start must be in \[0, word_limit=600\], got 700"),
    (lambda: check_range("q", None, 0, 1), r"method.q must be in \[0, 1\], got None"),
    (lambda: check_choice("mode", "c", ("a", "b")), "method.mode must be 'a' or 'b', got 'c'"),
    (lambda: check_choice("unit", "x", ("d", "o", "s")), "method.unit must be one of 'd', 'o', 's', got 'x'"),
    (lambda: check_bool("evolution", "no"), "method.evolution must be true or false, got 'no'"),
    (lambda: check_slot("prompt", "no slot", "{turn}"), r"method.prompt must be a text containing '\{turn\}', got 'no slot'"),
    (lambda: check_embedder("rag", None), "method=rag needs an embedder: set embedder=minilm .*got embedder=None"),
    (lambda: check_embedder("amem", None, "notes"), r"method=amem needs an embedder \(notes\)"),
])
def test_a_bad_value_is_one_line_naming_the_key(call, message):
    with pytest.raises(ValueError, match=f"^{message}") as err:
        call()
    assert "\n" not in str(err.value)


def test_setting_error_is_the_same_form():
    assert str(setting_error("x", "odd", 2)) == "method.x must be odd, got 2"
