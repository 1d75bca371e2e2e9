"""Evolution details a larger model depends on: membership by token path, truncated free
lists, and assimilation thresholds that carry over between models (Section 3.4)."""
from __future__ import annotations

import math
from collections import Counter

import pytest

import scgmem.core.evolution as evolution_module
from scgmem.core.decoding import GeneratedKey, KeyList
from scgmem.core.evolution import Evolution, _quantile
from scgmem.core.schema import CognitiveSchema
from scgmem.llm.protocol import Generation
from tests.core.conftest import make_conversation

WORDS = ("hiking", "lake", "pottery", "dog", "beach")


class ScriptedFreeLLM:
    """The tiny model's tokenizer and template; free generation returns a chosen text and token count."""

    def __init__(self, llm, text: str, n_tokens: int) -> None:
        self._llm, self.text, self.n_tokens = llm, text, n_tokens

    def __getattr__(self, name):
        return getattr(self._llm, name)

    def generate(self, prompts, **kwargs):
        return [[Generation(text=self.text, token_ids=[5] * self.n_tokens)] for _ in prompts]


def schema_for(llm):
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    for w in WORDS:
        schema.add(w)
    return schema


def scripted_keys(monkeypatch, per_turn):
    """Assimilation returns, for turn i, the keys per_turn[i] = [(text, concept, mean log-prob)]."""
    calls = iter(range(10**6))

    def fake_generate_keys(llm, schema, prompts, **kwargs):
        out = []
        for _ in prompts:
            keys = [GeneratedKey(text=t, concept=c, token_ids=[1], logprob=lp * 2, n_tokens=2)
                    for t, c, lp in per_turn[next(calls) % len(per_turn)]]
            out.append([KeyList(keys)])
        return out, None

    monkeypatch.setattr(evolution_module, "generate_keys", fake_generate_keys)


def test_membership_is_decided_by_the_token_path_not_the_decoded_text(tiny_llm, monkeypatch):
    schema = schema_for(tiny_llm)
    # a key whose decoding round trip differs ("Lake!" is no concept name) but whose tokens spell
    # the concept "lake"; and a text equal to a concept whose tokens spell none
    scripted_keys(monkeypatch, [[("Lake!", "lake", -0.5), ("dog", None, -0.5)]])
    counters = Counter()
    evo = Evolution(tiny_llm, schema, threshold_mode="absolute", keep_threshold=-9.0, trigger_threshold=-9.0,
                    counters=counters)
    (result,) = evo.assimilate(make_conversation(["a lake"]).turns)
    assert result.assimilated == ["lake"]
    assert counters["keys_generated"] == 2 and counters["keys_outside_schema"] == 1


@pytest.mark.parametrize("text, n_tokens, expected", [
    ("hiking, lake, beach walk", 24, ["hiking", "lake"]),  # cut at the budget inside "beach walk..."
    ("hiking, lake, beach", 10, ["hiking", "lake", "beach"]),  # ended before the budget: complete
    ("hiking, lake, beach,", 24, ["hiking", "lake", "beach"]),  # cut right after a separator
])
def test_a_free_list_cut_by_the_token_budget_loses_its_last_candidate(tiny_llm, text, n_tokens, expected):
    llm = ScriptedFreeLLM(tiny_llm, text, n_tokens)
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    evo = Evolution(llm, schema, free_max_new_tokens=24)
    turn = make_conversation(["hiking by the lake and a beach walk"]).turns
    (candidates,) = evo.propose(turn)
    assert [c for c, _ in candidates] == expected
    assert evo.counters["accommodation_dropped_truncated"] == (len(expected) == 2)


def test_quantile():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert _quantile(values, 0.0) == 1.0 and _quantile(values, 1.0) == 5.0
    assert _quantile(values, 0.5) == 3.0 and _quantile(values, 0.3) == pytest.approx(2.2)
    assert _quantile([], 0.5) == -math.inf


def decisions(tiny_llm, monkeypatch, shift: float, **kwargs):
    """Kept keys and accommodation per turn, for key scores shifted by `shift` (another model)."""
    scores = [[-0.4, -1.0, -2.5], [-3.0, -0.8], [-5.0, -6.0], [-1.2, -1.5, -4.0], [-0.3], [-2.2, -7.0]]
    per_turn = [[(w, w, s + shift) for w, s in zip(WORDS, row)] for row in scores]
    scripted_keys(monkeypatch, per_turn)
    llm = ScriptedFreeLLM(tiny_llm, "", 1)
    evo = Evolution(llm, schema_for(tiny_llm), **{"threshold_warmup": 6, **kwargs})
    conv = make_conversation(["hiking by the lake"] * 24)
    out = []
    for start in range(0, 24, 6):
        out += [(tuple(r.assimilated), r.accommodated) for r in evo.process(conv.turns[start:start + 6])]
    return out, evo


def test_quantile_thresholds_carry_over_to_a_model_whose_log_probs_sit_elsewhere(tiny_llm, monkeypatch):
    small, evo = decisions(tiny_llm, monkeypatch, 0.0, keep_quantile=0.5, trigger_quantile=0.3)
    large, _ = decisions(tiny_llm, monkeypatch, +1.5, keep_quantile=0.5, trigger_quantile=0.3)
    assert small == large  # the same decisions on the model's own scale
    assert any(acc for _, acc in small[6:]) and not all(acc for _, acc in small[6:])
    assert evo.keep_cut == pytest.approx(_quantile(evo.key_scores, 0.5))
    # fixed numbers calibrated on one model decide differently on the other
    small_abs, _ = decisions(tiny_llm, monkeypatch, 0.0, threshold_mode="absolute")
    large_abs, _ = decisions(tiny_llm, monkeypatch, +1.5, threshold_mode="absolute")
    assert small_abs != large_abs


def test_warm_up_keeps_every_key_and_accommodates_every_turn(tiny_llm, monkeypatch):
    out, evo = decisions(tiny_llm, monkeypatch, 0.0, keep_quantile=0.9, trigger_quantile=0.9, threshold_warmup=7)
    # the first batch (6 turns scored, fewer than 7) is the warm-up: every key kept, every turn accommodated
    assert all(len(kept) == n and acc for (kept, acc), n in zip(out[:6], (3, 2, 2, 3, 1, 2)))
    assert sum(len(kept) for kept, _ in out[6:]) < sum(len(kept) for kept, _ in out[:6]) * 3
    with pytest.raises(ValueError, match="threshold_mode"):
        Evolution(tiny_llm, schema_for(tiny_llm), threshold_mode="relative")
    with pytest.raises(ValueError, match="keep_quantile"):
        Evolution(tiny_llm, schema_for(tiny_llm), keep_quantile=1.5)
