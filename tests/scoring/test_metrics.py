"""scgmem.scoring.metrics against hand-worked values (docs/scoring.md)."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from scgmem.scoring import metrics
from scgmem.scoring.metrics import (aggregate, bleu1, bleu_tokenizer_name, bootstrap_ci,
                                    category_cis, evidence_recall, f1_amem, f1_locomo, f1_locomo_multi,
                                    normalize_locomo, paired_bootstrap)

CATS = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}


# -- F1, protocol=amem (token sets) -----------------------------------------------------


def test_f1_amem_uses_sets():
    # {the, cat} vs {the, cat}: the repeated "the" counts once -> 1.0 (a multiset F1 gives 0.8)
    assert f1_amem("the cat the", "the cat") == 1.0
    # {cat, dog} vs {cat}: P = 1/2, R = 1 -> 2/3 (the multiset F1 of LoCoMo gives 1/2)
    assert f1_amem("cat cat dog", "cat") == pytest.approx(2 / 3)


def test_f1_amem_normaliser():
    # . , ! ? become spaces and case folds: {paris, france} vs {paris} -> 2/3
    assert f1_amem("Paris, France!", "paris") == pytest.approx(2 / 3)
    assert f1_amem("Yes.", "yes") == 1.0
    # other punctuation stays attached: "cat;" is not "cat"; no stemming, no article removal
    assert f1_amem("cat;", "cat") == 0.0
    assert f1_amem("running dogs", "run dog") == 0.0
    # P = 1/3, R = 1/2 -> F1 = 2 * (1/6) / (5/6) = 0.4
    assert f1_amem("a red car", "the car") == pytest.approx(0.4)


def test_f1_amem_empty_and_disjoint():
    assert f1_amem("", "cat") == 0.0
    assert f1_amem("cat", "") == 0.0
    assert f1_amem("...", "cat") == 0.0  # only separators -> no tokens
    assert f1_amem("dog", "cat") == 0.0
    assert f1_amem("7 May 2023", "7 May 2023") == 1.0


# -- F1, protocol=locomo (stemmed multisets) ---------------------------------------------


def test_normalize_locomo_articles_punctuation_stemming():
    assert normalize_locomo("The cat and a hat, an owl!") == ["cat", "hat", "owl"]
    # whole words only: "theatre" and "android" keep their letters (then get stemmed)
    assert normalize_locomo("theatre android") == ["theatr", "android"]
    assert normalize_locomo("running dogs") == ["run", "dog"]
    assert normalize_locomo("  Multiple   spaces\tand\nlines ") == ["multipl", "space", "line"]
    assert normalize_locomo("the a an and") == []


def test_f1_locomo_multiset_and_stemming():
    assert f1_locomo("running dogs", "run dog") == 1.0
    # multiset: [cat, cat, dog] vs [cat]: common 1, P = 1/3, R = 1 -> 0.5
    assert f1_locomo("cat cat dog", "cat") == pytest.approx(0.5)
    # the articles go, so the repeated "the" does not count against the prediction
    assert f1_locomo("the cat the", "the cat") == 1.0
    # [cat, cat] vs [cat, dog]: common 1, P = 1/2, R = 1/2 -> 0.5 (the set F1 gives 2/3)
    assert f1_locomo("cat cat", "cat dog") == pytest.approx(0.5)
    assert f1_amem("cat cat", "cat dog") == pytest.approx(2 / 3)


def test_f1_locomo_empty():
    assert f1_locomo("", "cat") == 0.0
    assert f1_locomo("cat", "") == 0.0
    assert f1_locomo("the", "the") == 0.0  # both normalise to nothing


def test_f1_locomo_multi_comma_split():
    # gold parts rome / paris / oslo: best F1 over predicted parts 1, 1, 0 -> 2/3
    assert f1_locomo_multi("Paris, Rome", "rome, paris, oslo") == pytest.approx(2 / 3)
    # without the split (commas dropped): [pari, rome] vs [rome, pari, oslo] -> P=1, R=2/3 -> 0.8
    assert f1_locomo("Paris, Rome", "rome, paris, oslo") == pytest.approx(0.8)
    # gold "Paris" -> 1; gold "big Rome" vs "Paris" -> 0; mean 0.5
    assert f1_locomo_multi("Paris", "Paris, big Rome") == pytest.approx(0.5)
    # a predicted part can serve several gold parts; extra predicted parts cost nothing
    assert f1_locomo_multi("dogs, cats, fish", "dog") == 1.0
    assert isinstance(f1_locomo_multi("a", "b"), float)


# -- BLEU-1 --------------------------------------------------------------------------------


def test_bleu1_exact_match_and_case():
    assert bleu1("7 May 2023", "7 May 2023") == pytest.approx(1.0)
    assert bleu1("The Cat", "the cat") == pytest.approx(1.0)


def test_bleu1_brevity_penalty():
    # c = 2 prediction tokens, r = 5 reference tokens, unigram precision 1 -> exp(1 - 5/2)
    assert bleu1("the cat", "the cat sat on mat") == pytest.approx(math.exp(1 - 5 / 2))
    # longer prediction: no penalty, precision 2/3
    assert bleu1("the cat sat", "the cat") == pytest.approx(2 / 3)
    # clipped counts: "the the the" vs "the cat": 1 of 3 unigrams match, c > r
    assert bleu1("the the the", "the cat") == pytest.approx(1 / 3)


def test_bleu1_empty_is_zero_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bleu1("", "the cat") == 0.0
        assert bleu1("the cat", "") == 0.0
        assert bleu1("   ", "") == 0.0
        assert bleu1("dog", "the cat") == 0.0  # no overlap: 0 with smoothing, no warning
        assert bleu1("cat", "cat") == pytest.approx(1.0)  # one token: no 2-gram warning


def test_bleu_tokenizer_recorded(monkeypatch):
    assert bleu_tokenizer_name() in ("punkt", "treebank_preserve_line")
    monkeypatch.setattr(metrics, "_punkt_available", lambda: False)
    assert bleu_tokenizer_name() == "treebank_preserve_line"
    # the fallback splits clitics and the final period like nltk's word tokeniser
    assert metrics._bleu_tokens("I don't know.") == ["i", "do", "n't", "know", "."]
    assert bleu1("I don't know.", "i do n't know .") == pytest.approx(1.0)
    assert metrics.metric_settings()["bleu1"]["tokenizer"] == "treebank_preserve_line"
    monkeypatch.setattr(metrics, "_punkt_available", lambda: True)
    assert bleu_tokenizer_name() == "punkt"


# -- evidence recall -----------------------------------------------------------------------


def test_evidence_recall():
    assert evidence_recall([], ["D1:1"]) is None
    assert evidence_recall(["D1:1", "D2:3"], []) == 0.0
    assert evidence_recall(["D1:1", "D2:3"], ["D2:3", "D9:9"]) == 0.5
    assert evidence_recall(["D1:1", "D1:1"], ["D1:1"]) == 1.0  # distinct ids


# -- aggregate -----------------------------------------------------------------------------


def _rec(cat, f1, bleu=None, er=None, sid="conv-1"):
    return {"category": cat, "f1": f1, "bleu1": f1 if bleu is None else bleu, "evidence_recall": er,
            "sample_id": sid}


def test_aggregate_unweighted_percent_and_empty_categories():
    records = [_rec(1, 1.0, 0.5, None), _rec(4, 0.0, 0.0, 0.5), _rec(4, 0.0, 0.25, None), _rec(4, 0.0, 0.5, 1.0)]
    out = aggregate(records, CATS)
    cats = out["categories"]
    assert list(cats) == ["multi_hop", "temporal", "single_hop", "adversarial"]
    assert cats["multi_hop"] == {"n": 1, "f1": 100.0, "bleu1": 50.0, "evidence_recall": None}
    assert cats["single_hop"]["n"] == 3
    assert cats["single_hop"]["f1"] == 0.0
    assert cats["single_hop"]["bleu1"] == pytest.approx(25.0)
    assert cats["single_hop"]["evidence_recall"] == pytest.approx(0.75)  # the None is skipped, 0..1 units
    assert cats["temporal"] == {"n": 0, "f1": None, "bleu1": None, "evidence_recall": None}
    # unweighted mean over categories with n > 0: (100 + 0) / 2 = 50; weighted would be 25
    assert out["average"]["f1"] == pytest.approx(50.0)
    assert out["average"]["bleu1"] == pytest.approx((50.0 + 25.0) / 2)
    # LoCoMo's Overall: the mean over all 4 questions, (1 + 0 + 0 + 0) / 4 = 25
    assert out["overall_weighted"] == {"n": 4, "f1": pytest.approx(25.0), "bleu1": pytest.approx(100 * 1.25 / 4)}
    assert "bertscore_f1" not in cats["multi_hop"]  # only when the records carry it
    json.dumps(out)


def test_aggregate_bertscore_when_present():
    records = [{**_rec(1, 1.0), "bertscore_f1": 0.9}, {**_rec(4, 0.0), "bertscore_f1": 0.3},
               {**_rec(4, 0.0), "bertscore_f1": 0.5}]
    out = aggregate(records, CATS)
    assert out["categories"]["single_hop"]["bertscore_f1"] == pytest.approx(40.0)
    assert out["average"]["bertscore_f1"] == pytest.approx((90.0 + 40.0) / 2)
    assert out["overall_weighted"]["bertscore_f1"] == pytest.approx(100 * 1.7 / 3)


def test_aggregate_no_records_and_unknown_category():
    out = aggregate([], CATS)
    assert out["average"] == {"f1": None, "bleu1": None}
    assert out["overall_weighted"] == {"n": 0, "f1": None, "bleu1": None}
    assert all(c["n"] == 0 for c in out["categories"].values())
    with pytest.raises(ValueError, match="3"):
        aggregate([_rec(3, 1.0)], CATS)


def test_aggregate_other_mapping():
    mem0 = {1: "single_hop", 2: "temporal", 3: "multi_hop", 4: "open_domain"}
    out = aggregate([_rec(3, 0.5)], mem0)
    assert out["categories"]["multi_hop"]["f1"] == pytest.approx(50.0)


# -- bootstrap -----------------------------------------------------------------------------


def test_bootstrap_ci_deterministic_and_contains_mean():
    values = np.random.default_rng(1).random(200)
    ci = bootstrap_ci(values, n_resamples=500, seed=3)
    assert ci == bootstrap_ci(values, n_resamples=500, seed=3)
    assert ci != bootstrap_ci(values, n_resamples=500, seed=4)
    low, high = ci
    assert low < values.mean() < high
    assert high - low < 0.2  # ~ 4 * 0.29 / sqrt(200) = 0.08
    wide = bootstrap_ci(values, n_resamples=500, seed=3, alpha=0.01)
    assert wide[0] <= low and wide[1] >= high


def test_bootstrap_ci_edge_cases():
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert bootstrap_ci([1.0]) == (1.0, 1.0)
    for bad in ([], [[1.0, 2.0]]):
        with pytest.raises(ValueError, match="values"):
            bootstrap_ci(bad)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci([1.0], n_resamples=0)
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_ci([1.0], alpha=1.5)


def test_paired_bootstrap():
    rng = np.random.default_rng(0)
    b = rng.random(300)
    # a beats b by exactly 0.1 on every question: every resampled diff is 0.1
    out = paired_bootstrap(b + 0.1, b, n_resamples=200, seed=0)
    assert out["diff"] == pytest.approx(0.1)
    assert out["ci_low"] == pytest.approx(0.1) and out["ci_high"] == pytest.approx(0.1)
    assert out["p_value"] == 0.0
    # identical runs: every diff is 0, and "<= 0" counts it
    assert paired_bootstrap(b, b, n_resamples=50)["p_value"] == 1.0
    # noisy a < b: p close to 1, CI contains the observed diff
    a = b - 0.05 + 0.1 * rng.standard_normal(300)
    out = paired_bootstrap(a, b, n_resamples=500, seed=7)
    assert out == paired_bootstrap(a, b, n_resamples=500, seed=7)
    assert out["ci_low"] < out["diff"] < out["ci_high"] < 0
    assert out["p_value"] > 0.95
    with pytest.raises(ValueError, match=r"\(3,\) and \(2,\)"):
        paired_bootstrap([1, 2, 3], [1, 2])


def test_category_cis_percent():
    records = [_rec(1, v) for v in (0.0, 1.0, 1.0, 0.0, 1.0)] + [_rec(4, 0.5)]
    out = category_cis(records, CATS, n_resamples=200)
    low, high = out["multi_hop"]["f1"]
    assert 0.0 <= low < 60.0 < high <= 100.0
    assert out["single_hop"]["f1"] == [50.0, 50.0]
    assert out["temporal"] == {"f1": None, "bleu1": None}


def test_docstring_examples():
    import doctest

    result = doctest.testmod(metrics)
    assert result.attempted >= 8 and result.failed == 0
