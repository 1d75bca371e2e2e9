"""scgmem.scoring.protocols: prompts, references and scores of protocol=amem|locomo (docs/scoring.md)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from scgmem.api import QA
from scgmem.scoring import metrics
from scgmem.scoring.protocols import NOT_MENTIONED, AmemProtocol, AnswerPrompt, LocomoProtocol

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "protocol"
CATS = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}
CONTEXT = "DATE: 1:56 pm on 8 May, 2023\nCaroline: I went to a support group yesterday."


def qa(category: int, answer="7 May 2023", adversarial=None, question="When did Caroline go?", index=0):
    return QA("conv-x", index, question, category, answer, adversarial, ("D1:3",))


CAT5 = qa(5, answer=None, adversarial="Yes", question="Did Caroline adopt a cat?")


def content(prompt: AnswerPrompt) -> str:
    """The user message; answer_format=json puts A-MEM's system message before it."""
    roles = [m["role"] for m in prompt.messages]
    assert roles == (["system", "user"] if prompt.assistant_prefix else ["user"])
    return prompt.messages[-1]["content"]


@pytest.fixture(params=[AmemProtocol, LocomoProtocol], ids=["amem", "locomo"])
def protocol(request):
    return request.param(categories=CATS)


# -- shared behaviour ----------------------------------------------------------------------


def test_context_precedes_question(protocol):
    for category in (1, 2, 4, 5):
        q = CAT5 if category == 5 else qa(category)
        text = content(protocol.build_prompt(q, CONTEXT, np.random.default_rng(0)))
        assert CONTEXT in text and q.question in text
        assert text.index(CONTEXT) < text.index(q.question)
        # the empty-context prompt (the runner's overhead measurement) is the same minus the context
        empty = content(protocol.build_prompt(q, "", np.random.default_rng(0)))
        assert len(empty) == len(text) - len(CONTEXT)


def test_category2_prompt_asks_for_the_date(protocol):
    text = content(protocol.build_prompt(qa(2), CONTEXT, np.random.default_rng(0)))
    assert "DATE of" in text and "CONVERSATION" in text and "approximate date" in text
    assert "DATE of" not in content(protocol.build_prompt(qa(4), CONTEXT, np.random.default_rng(0)))


def test_category5_option_order_depends_only_on_seed(protocol):
    orders = set()
    for seed in range(30):
        a = protocol.build_prompt(CAT5, CONTEXT, np.random.default_rng(seed)).options
        other_qa = qa(5, answer=None, adversarial="Yes", question="Something else entirely?", index=9)
        b = protocol.build_prompt(other_qa, "another context", np.random.default_rng(seed)).options
        assert a == b
        assert sorted(a) == sorted([NOT_MENTIONED, "Yes"])
        # the rule: one uniform draw, < 0.5 puts "Not mentioned" first
        assert (a[0] == NOT_MENTIONED) == (np.random.default_rng(seed).random() < 0.5)
        orders.add(tuple(a))
    assert len(orders) == 2
    # non-category-5 prompts carry no options and leave the rng alone
    rng = np.random.default_rng(5)
    assert protocol.build_prompt(qa(1), CONTEXT, rng).options is None
    assert rng.random() == np.random.default_rng(5).random()


def test_options_are_shown_in_order(protocol):
    for seed in (0, 2):  # seed 0 -> distractor first, seed 2 -> "Not mentioned" first
        p = protocol.build_prompt(CAT5, CONTEXT, np.random.default_rng(seed))
        text = content(p)
        assert text.index(p.options[0]) < text.index(p.options[1])


def test_integer_answers_are_strings(protocol):
    assert protocol.reference(qa(4, answer=2022)) == "2022"
    assert protocol.score(qa(4, answer=2022), "2022")["f1"] == 1.0


def test_settings_are_complete_and_json(protocol):
    s = protocol.settings()
    json.dumps(s)
    assert s["protocol"] == protocol.name
    assert s["categories"] == {"1": "multi_hop", "2": "temporal", "4": "single_hop", "5": "adversarial"}
    assert s["metrics_version"] == metrics.METRICS_VERSION
    assert s["bleu1"]["tokenizer"] == metrics.bleu_tokenizer_name()
    assert "method1" in s["bleu1"]["smoothing"]
    for key in ("f1_variant", "cat5_reference", "temperature", "max_new_tokens"):
        assert key in s


def test_scores_are_in_unit_range(protocol):
    for category, pred in [(1, "7 May"), (2, "May 2023, 7"), (4, ""), (5, "Not mentioned"), (5, "Yes")]:
        q = CAT5 if category == 5 else qa(category)
        out = protocol.score(q, pred)
        assert set(out) == {"f1", "bleu1"}
        assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in out.values())


def test_argument_errors_show_the_value():
    with pytest.raises(ValueError, match="7"):
        AmemProtocol(categories={7: "x"})
    with pytest.raises(ValueError, match="-1"):
        LocomoProtocol(temperature=-1)
    with pytest.raises(ValueError, match="0"):
        AmemProtocol(max_new_tokens=0)
    with pytest.raises(ValueError, match="wrong"):
        AmemProtocol(cat5_reference="wrong")
    with pytest.raises(ValueError, match="category must be 1-5, got 6"):
        AmemProtocol().build_prompt(qa(6), "", np.random.default_rng(0))


def test_other_category_mapping_is_kept():
    mem0 = {1: "single_hop", 2: "temporal", 3: "multi_hop", 4: "open_domain"}
    p = AmemProtocol(categories=mem0)
    assert p.settings()["categories"]["3"] == "multi_hop"
    assert AmemProtocol().categories == CATS  # default: official numbers, category 3 excluded


# -- protocol=amem ---------------------------------------------------------------------------


def test_amem_temperatures():
    p = AmemProtocol()
    assert [p.build_prompt(CAT5 if c == 5 else qa(c), "", np.random.default_rng(0)).temperature
            for c in (1, 2, 4, 5)] == [0.7, 0.7, 0.7, 0.5]
    greedy = AmemProtocol(temperature=0)
    assert {greedy.build_prompt(CAT5 if c == 5 else qa(c), "", np.random.default_rng(0)).temperature
            for c in (1, 2, 4, 5)} == {0.0}
    assert greedy.settings()["temperature"] == {"1": 0.0, "2": 0.0, "4": 0.0, "5": 0.0}


def test_amem_prompt_wording():
    text = content(AmemProtocol().build_prompt(qa(1), CONTEXT, np.random.default_rng(0)))
    assert "short phrase" in text and "exact words from the context" in text
    text = content(AmemProtocol().build_prompt(CAT5, CONTEXT, np.random.default_rng(0)))
    assert "Select the correct answer" in text and "(a)" not in text


def test_amem_category5_reference_rewards_the_trap_by_default():
    p = AmemProtocol()
    assert p.reference(CAT5) == "Yes"
    assert p.score(CAT5, "Yes") == {"f1": 1.0, "bleu1": pytest.approx(1.0)}
    assert p.score(CAT5, NOT_MENTIONED)["f1"] == 0.0
    s = p.settings()
    assert s["cat5_reference"] == "adversarial"
    assert "A-mem/issues/8" in s["cat5_reference_note"] and "rewards" in s["cat5_reference_note"]


def test_amem_category5_reference_answer():
    p = AmemProtocol(cat5_reference="answer")
    assert p.reference(CAT5) == NOT_MENTIONED  # 444 of 446 items have no answer
    assert p.reference(qa(5, answer="No", adversarial="Yes")) == "No"
    assert p.score(CAT5, "Not mentioned in the conversation.")["f1"] == 1.0
    # the options still show the adversarial answer
    assert "Yes" in p.build_prompt(CAT5, "", np.random.default_rng(0)).options


def test_amem_scores_with_set_f1_and_bleu1():
    p = AmemProtocol()
    q = qa(4, answer="the cat")
    assert p.score(q, "the cat the")["f1"] == 1.0  # sets
    assert p.score(q, "running dogs")["f1"] == 0.0
    q = qa(1, answer="the cat sat on mat")
    out = p.score(q, "the cat")
    assert out["f1"] == pytest.approx(2 * 1 * 0.4 / 1.4)  # P = 1, R = 2/5
    assert out["bleu1"] == pytest.approx(math.exp(1 - 5 / 2))


# -- protocol=locomo -------------------------------------------------------------------------


def test_locomo_is_greedy_unless_overridden():
    p = LocomoProtocol()
    assert {p.build_prompt(CAT5 if c == 5 else qa(c), "", np.random.default_rng(0)).temperature
            for c in (1, 2, 4, 5)} == {0.0}
    assert LocomoProtocol(temperature=0.3).build_prompt(qa(1), "", np.random.default_rng(0)).temperature == 0.3


def test_locomo_prompt_wording():
    text = content(LocomoProtocol().build_prompt(qa(2), CONTEXT, np.random.default_rng(0)))
    assert "Based on the above context" in text
    assert f"{qa(2).question} Use DATE of CONVERSATION to answer with an approximate date." in text
    p = LocomoProtocol().build_prompt(CAT5, CONTEXT, np.random.default_rng(2))
    assert p.options == [NOT_MENTIONED, "Yes"]
    assert f"(a) {NOT_MENTIONED} (b) Yes." in content(p)


def test_locomo_scoring_per_category():
    p = LocomoProtocol()
    assert p.score(qa(4, answer="run dog"), "running dogs")["f1"] == 1.0  # stemming
    assert p.score(qa(4, answer="cat"), "cat cat dog")["f1"] == pytest.approx(0.5)  # multiset
    # category 1: comma-split
    assert p.score(qa(1, answer="rome, paris, oslo"), "Paris, Rome")["f1"] == pytest.approx(2 / 3)
    assert p.score(qa(4, answer="rome, paris, oslo"), "Paris, Rome")["f1"] == pytest.approx(0.8)
    # category 3: gold cut at the first ';'
    q3 = qa(3, answer="Likely yes; she collects books")
    assert p.reference(q3) == "Likely yes"
    assert p.score(q3, "likely yes")["f1"] == 1.0


@pytest.mark.parametrize("prediction, options, expected", [
    ("Not mentioned in the conversation", None, 1.0),
    ("It is NOT MENTIONED.", None, 1.0),
    ("No information available", None, 1.0),
    ("Yes", None, 0.0),
    ("", None, 0.0),
    # LoCoMo's get_cat_5_answer maps option letters back to text
    ("a", [NOT_MENTIONED, "Yes"], 1.0),
    ("(A)", [NOT_MENTIONED, "Yes"], 1.0),
    ("b", [NOT_MENTIONED, "Yes"], 0.0),
    (" (b) ", ["Yes", NOT_MENTIONED], 1.0),
    ("a", ["Yes", NOT_MENTIONED], 0.0),
    ("a", None, 0.0),  # no options: the bare letter is scored as text
])
def test_locomo_category5_rule(prediction, options, expected):
    out = LocomoProtocol().score(CAT5, prediction, options=options)
    assert out["f1"] == expected


def test_locomo_category5_reference_and_bleu():
    p = LocomoProtocol()
    assert p.reference(CAT5) == NOT_MENTIONED
    assert p.score(CAT5, NOT_MENTIONED)["bleu1"] == pytest.approx(1.0)
    assert p.score(CAT5, "a", options=[NOT_MENTIONED, "Yes"])["bleu1"] == pytest.approx(1.0)
    assert p.score(CAT5, "Yes")["bleu1"] == 0.0
    assert LocomoProtocol.resolve_option("(a)", ["x", "y"]) == "x"
    assert LocomoProtocol.resolve_option("Maybe so", ["x", "y"]) == "maybe so"


# -- Hydra configs ---------------------------------------------------------------------------


def protocol_node(name: str):
    """configs/protocol/<name>.yaml as the runner instantiates it: `chat` (the chat policy) goes to the model,
    `judge` to the judge (scgmem.harness.run.split_protocol)."""
    from scgmem.harness.run import split_protocol
    return split_protocol(OmegaConf.create({"protocol": OmegaConf.load(CONFIGS / f"{name}.yaml")}))[0]


@pytest.mark.parametrize("name, cls", [("amem", AmemProtocol), ("locomo", LocomoProtocol)])
def test_yaml_instantiates(name, cls):
    cfg = protocol_node(name)
    assert "categories" not in cfg  # the runner passes data.categories
    categories = OmegaConf.create({"data": {"categories": CATS}}).data.categories
    protocol = instantiate(cfg, categories=categories)
    assert type(protocol) is cls and protocol.name == name
    assert protocol.categories == CATS
    json.dumps(protocol.settings())
    overridden = instantiate(cfg, categories=categories, temperature=0)
    assert set(overridden.settings()["temperature"].values()) == {0.0}


def test_yaml_values_are_the_upstream_ones():
    amem = instantiate(protocol_node("amem"))
    assert (amem.base_temperature, amem.cat5_temperature, amem.cat5_reference) == (0.7, 0.5, "adversarial")
    assert amem.temperature is None
    locomo = instantiate(protocol_node("locomo"))
    assert locomo.settings()["temperature"] == {"1": 0.0, "2": 0.0, "4": 0.0, "5": 0.0}


# -- the real file ---------------------------------------------------------------------------


def test_every_real_question_builds_and_self_scores(locomo_path):
    from scgmem.data.locomo import load_locomo

    conversations, _ = load_locomo(locomo_path)
    amem, locomo = AmemProtocol(), LocomoProtocol()
    rng = np.random.default_rng(0)
    n = 0
    for conv in conversations:
        for q in conv.qa:
            if q.category not in CATS:
                continue
            for p in (amem, locomo):
                prompt = p.build_prompt(q, "ctx", rng)
                assert (prompt.options is not None) == (q.category == 5)
                ref = p.reference(q)
                assert isinstance(ref, str) and ref
                scores = p.score(q, ref, options=prompt.options)
                assert scores["bleu1"] == pytest.approx(1.0)
                if p is amem or metrics.normalize_locomo(ref):
                    assert scores["f1"] == pytest.approx(1.0), (q, ref)
            n += 1
    assert n == 282 + 321 + 841 + 446  # categories 1, 2, 4, 5 in locomo10.json


# -- category 5 items whose answer is "No" ---------------------------------------------------

NO_ITEM = qa(5, answer="No", adversarial="Yes", question="Is Oscar Melanie's pet?")


def test_cat5_no_items_are_scored_against_no_which_no_option_shows():
    """Under cat5_reference=answer the reference is the item's "No"; the options shown are
    "Not mentioned in the conversation" and the adversarial "Yes", so either choice scores 0
    and only a free-form "No" scores. (docs/scoring.md)"""
    p = AmemProtocol(cat5_reference="answer", answer_format="text")
    prompt = p.build_prompt(NO_ITEM, "ctx", np.random.default_rng(0))
    assert sorted(prompt.options) == sorted([NOT_MENTIONED, "Yes"]) and "No" not in prompt.options
    assert p.reference(NO_ITEM) == "No"
    for option in prompt.options:
        assert p.score(NO_ITEM, option, options=prompt.options) == {"f1": 0.0, "bleu1": 0.0}
    assert p.score(NO_ITEM, "No")["f1"] == 1.0
    assert "conv-26 qa 167, 178" in p.settings()["cat5_reference_note"]
    # The default (adversarial) rewards "Yes"; protocol=locomo credits "Not mentioned" as for any item.
    assert AmemProtocol().score(NO_ITEM, "Yes")["f1"] == 1.0
    assert LocomoProtocol().score(NO_ITEM, NOT_MENTIONED, options=prompt.options)["f1"] == 1.0
    assert LocomoProtocol().score(NO_ITEM, "No", options=prompt.options)["f1"] == 0.0


def test_the_real_file_has_exactly_two_such_items(locomo_path):
    from scgmem.data.locomo import load_locomo

    conversations, _ = load_locomo(locomo_path)
    items = [(q.sample_id, q.index, q.answer, q.adversarial_answer)
             for c in conversations for q in c.qa if q.category == 5 and q.answer is not None]
    assert items == [("conv-26", 167, "No", "Yes"), ("conv-26", 178, "No", "Yes")]
