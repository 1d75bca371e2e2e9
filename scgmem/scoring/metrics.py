"""Answer metrics for LoCoMo QA, as pure functions (docs/scoring.md; paper Section 4, Table 1).

Two families, one shared normaliser each:

- `protocol=amem` (the paper's Table 1, following A-MEM's evaluation code):
  `f1_amem` (token *sets* after `_amem_tokens`) and `bleu1` (nltk BLEU-1 on lowercased
  nltk word tokens, smoothing method1).
- `protocol=locomo` (the official LoCoMo task_eval/evaluation.py): `f1_locomo` (token
  *multisets* after `normalize_locomo`, Porter-stemmed) and `f1_locomo_multi` for
  category 1 (comma-split gold and prediction).

Beyond both: `evidence_recall` per question, `aggregate` (per-category means, the paper's
unweighted "Average" and LoCoMo's question-weighted "Overall"), and `bootstrap_ci` /
`paired_bootstrap` for uncertainty. BERTScore, optional, is in `scgmem.scoring.bertscore`.

Per-question scores are in 0..1; `aggregate` reports F1 and BLEU-1 in percent, as the
paper does. Any change to a number produced here bumps `METRICS_VERSION`, which every
run writes into its summary.

Worked examples::

    >>> f1_amem("the cat the", "the cat")          # sets: {the, cat} vs {the, cat}
    1.0
    >>> f1_locomo("the cat the", "the cat")        # articles dropped: [cat] vs [cat]
    1.0
    >>> round(f1_locomo("cat cat dog", "cat"), 4)  # multiset: common 1, P=1/3, R=1
    0.5
    >>> f1_locomo("running dogs", "run dog")       # Porter stems: run, dog
    1.0
"""
from __future__ import annotations

import functools
import re
import string
from collections import Counter
from typing import Iterable, Mapping, Sequence

import nltk
import numpy as np
from nltk.stem import PorterStemmer
from nltk.tokenize import word_tokenize
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from scgmem.scoring.metric_table import OPTIONAL, fraction_metrics, percent_metrics, table_metrics

# Bump on any change that can move a score; written into every summary.
METRICS_VERSION = "1.0"

# -- protocol=amem: A-MEM utils.py (simple_tokenize, calculate_f1, calculate_bleu_scores) --

_AMEM_SPLIT = str.maketrans({".": " ", ",": " ", "!": " ", "?": " "})


def _amem_tokens(text: str) -> list[str]:
    """A-MEM's normaliser: lowercase, `. , ! ?` -> space, split on whitespace."""
    return str(text).lower().translate(_AMEM_SPLIT).split()


def f1_amem(prediction: str, reference: str) -> float:
    """A-MEM's token-*set* F1 (duplicates count once).

    Returns 0.0 if either side has no tokens or nothing is common.

    >>> round(f1_amem("Paris, France!", "paris"), 4)    # P=1/2, R=1
    0.6667
    """
    pred, ref = set(_amem_tokens(prediction)), set(_amem_tokens(reference))
    common = len(pred & ref)
    if not pred or not ref or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


@functools.lru_cache(maxsize=1)
def _punkt_available() -> bool:
    """Whether `nltk.word_tokenize` can run with its default (punkt) sentence splitter.

    nltk >= 3.8.2 looks for `punkt_tab`, older versions for `punkt`; trying the call is
    the one check that matches whichever this nltk wants.
    """
    try:
        word_tokenize("a. b")
    except LookupError:
        return False
    return True


def bleu_tokenizer_name() -> str:
    """The tokeniser `bleu1` uses here: "punkt" (A-MEM's `nltk.word_tokenize`) or
    "treebank_preserve_line" (`word_tokenize(text, preserve_line=True)`, no data needed:
    sentence-internal periods stay attached, e.g. "know." is one token)."""
    return "punkt" if _punkt_available() else "treebank_preserve_line"


def _bleu_tokens(text: str) -> list[str]:
    text = str(text).lower()
    if _punkt_available():
        return word_tokenize(text)
    return word_tokenize(text, preserve_line=True)


_SMOOTHING = SmoothingFunction().method1


def bleu1(prediction: str, reference: str) -> float:
    """A-MEM's BLEU-1: nltk `sentence_bleu([ref], pred, weights=(1,0,0,0), method1)`.

    Includes the brevity penalty exp(1 - r/c) when the prediction (c tokens) is shorter
    than the reference (r tokens). Empty prediction or reference -> 0.0 (nltk would warn).

    >>> round(bleu1("the cat", "the cat sat on mat"), 4)   # P1 = 1, BP = exp(1 - 5/2)
    0.2231
    """
    pred, ref = _bleu_tokens(prediction), _bleu_tokens(reference)
    if not pred or not ref:
        return 0.0
    return float(sentence_bleu([ref], pred, weights=(1, 0, 0, 0), smoothing_function=_SMOOTHING))


# -- protocol=locomo: LoCoMo task_eval/evaluation.py (normalize_answer, f1_score, f1) --

_STEMMER = PorterStemmer()  # default mode (NLTK_EXTENSIONS), as LoCoMo's `PorterStemmer()`
_LOCOMO_PUNCT = str.maketrans("", "", string.punctuation)  # ASCII punctuation only, as upstream
_LOCOMO_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_locomo(text: str) -> list[str]:
    """LoCoMo's normaliser, in its order: drop commas, lowercase, strip punctuation,
    remove a/an/the/and, collapse whitespace; then Porter-stem every token.

    >>> normalize_locomo("The dogs, and a cat!")
    ['dog', 'cat']
    """
    text = str(text).replace(",", "").lower().translate(_LOCOMO_PUNCT)
    text = _LOCOMO_ARTICLES.sub(" ", text)
    return [_STEMMER.stem(w) for w in text.split()]


def f1_locomo(prediction: str, reference: str) -> float:
    """LoCoMo's token-*multiset* F1 (Counter overlap) on `normalize_locomo` tokens."""
    pred, ref = normalize_locomo(prediction), normalize_locomo(reference)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1_locomo_multi(prediction: str, reference: str) -> float:
    """LoCoMo's category-1 F1: split both on commas; for each gold part the best
    `f1_locomo` over predicted parts; the mean over gold parts.

    >>> f1_locomo_multi("Paris, Rome", "rome, paris, oslo")    # (1 + 1 + 0) / 3
    0.6666666666666666
    """
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(reference).split(",")]
    return float(np.mean([max(f1_locomo(p, g) for p in preds) for g in golds]))


# -- beyond both --------------------------------------------------------------------------


def evidence_recall(evidence: Iterable[str], retrieved: Iterable[str]) -> float | None:
    """|gold evidence ids among the retrieved dia_ids| / |gold evidence ids| (distinct ids).

    Returns None when there is no gold evidence (the question cannot be attributed).
    """
    gold = set(evidence)
    if not gold:
        return None
    return len(gold & set(retrieved)) / len(gold)


def _mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def aggregate(records: Iterable[Mapping], categories: Mapping[int, str]) -> dict:
    """Per-category means and the paper's "Average".

    Args:
        records: per-question dicts with `category` (LoCoMo number), `f1` and `bleu1`
            (0..1) and `evidence_recall` (0..1 or None).
        categories: LoCoMo number -> column name, e.g. {1: "multi_hop", 2: "temporal",
            4: "single_hop", 5: "adversarial"}.

    Returns:
        {"categories": {name: {"n", "f1", "bleu1", "evidence_recall"}},
         "average": {"f1", "bleu1"}, "overall_weighted": {"f1", "bleu1", "n"}}. F1 and
        BLEU-1 are in percent; evidence_recall is a 0..1 mean over the category's questions
        that have evidence (None if none). "average" is the *unweighted* mean of the category
        means over categories with n > 0 (the paper's definition, checked against every row
        of Table 1); "overall_weighted" is the mean over all the records, i.e. each category
        weighted by its question count (LoCoMo's "Overall", task_eval/evaluation_stats.py);
        None if there are none. Categories without records get n=0 and None values. When
        records carry "bertscore_f1" (0..1), it is aggregated the same way (percent).

    Raises:
        ValueError: a record's category is not in `categories`.
    """
    by_cat: dict[int, list[Mapping]] = {int(c): [] for c in categories}
    for r in records:
        cat = int(r["category"])
        if cat not in by_cat:
            raise ValueError(f"aggregate: record category {cat!r} is not in categories {dict(categories)!r}")
        by_cat[cat].append(r)
    every = [r for rows in by_cat.values() for r in rows]
    # The table's percent metrics (F1, BLEU-1, ...); an optional one (BERTScore) only when computed.
    keys = [m.name for m in percent_metrics() if m.source != OPTIONAL or any(m.name in r for r in every)]

    def percent(rows: list[Mapping], key: str) -> float | None:
        mean = _mean_or_none([float(r[key]) for r in rows if r.get(key) is not None])
        return None if mean is None else 100.0 * mean

    out: dict = {"categories": {}, "average": {}, "overall_weighted": {"n": len(every)}}
    for cat, name in categories.items():
        rows = by_cat[int(cat)]
        out["categories"][name] = {
            "n": len(rows),
            **{key: percent(rows, key) for key in keys},
            **{m.name: _mean_or_none([float(r[m.name]) for r in rows if r.get(m.name) is not None])
               for m in fraction_metrics()},
        }
    scored = [c for c in out["categories"].values() if c["n"] > 0]
    for key in keys:
        out["average"][key] = _mean_or_none([c[key] for c in scored if c[key] is not None])
        out["overall_weighted"][key] = percent(every, key)
    return out


def _bootstrap_means(values: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of `n_resamples` resamples (with replacement) of `values` (n,) -> (n_resamples,).

    Drawn in blocks so that memory stays ~8 MB per block whatever n is.
    """
    n = len(values)
    block = max(1, 1_000_000 // n)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, block):
        stop = min(start + block, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))  # (block, n)
        means[start:stop] = values[idx].mean(axis=1)
    return means


def _check_bootstrap_args(n_resamples: int, alpha: float) -> None:
    if not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")


def bootstrap_ci(values: Sequence[float], n_resamples: int = 1000, seed: int = 0,
                 alpha: float = 0.05) -> tuple[float, float]:
    """Percentile-bootstrap (1 - alpha) confidence interval of the mean of `values`.

    Deterministic given `seed`. Units follow the input (pass percent to get percent).

    Raises:
        ValueError: `values` is empty, or bad `n_resamples` / `alpha`.
    """
    _check_bootstrap_args(n_resamples, alpha)
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"bootstrap_ci: values must be a non-empty 1-D sequence, got shape {arr.shape}")
    means = _bootstrap_means(arr, n_resamples, np.random.default_rng(seed))
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_resamples: int = 1000, seed: int = 0,
                     alpha: float = 0.05) -> dict:
    """Paired bootstrap between two runs scored on the same questions (a[i], b[i] aligned).

    Resamples question indices jointly and recomputes mean(a) - mean(b).

    Returns:
        {"diff": mean(a) - mean(b),
         "ci_low", "ci_high": percentile (1 - alpha) interval of the resampled diffs,
         "p_value": share of resampled diffs <= 0}. The p-value is one-sided, for the
        claim "a scores higher than b" (Koehn 2004's paired bootstrap resampling): a small
        value means a > b held in nearly every resample; it says nothing about b > a.
        Deterministic given `seed`.

    Raises:
        ValueError: empty or differently long inputs, or bad `n_resamples` / `alpha`.
    """
    _check_bootstrap_args(n_resamples, alpha)
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.ndim != 1 or a_arr.shape != b_arr.shape or a_arr.size == 0:
        raise ValueError(f"paired_bootstrap: a and b must be non-empty aligned 1-D sequences, "
                         f"got shapes {a_arr.shape} and {b_arr.shape}")
    diffs = _bootstrap_means(a_arr - b_arr, n_resamples, np.random.default_rng(seed))
    low, high = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return {"diff": float(a_arr.mean() - b_arr.mean()), "ci_low": float(low), "ci_high": float(high),
            "p_value": float(np.mean(diffs <= 0))}


def average_ci(records: list[dict], categories: dict[int, str], key: str, n_resamples: int = 1000,
               seed: int = 0, alpha: float = 0.05) -> tuple[float, float] | None:
    """Percentile-bootstrap CI (percent) of the paper's Average: the unweighted mean of the
    category means. Each resample draws every category's questions with replacement within
    that category (so each category keeps its size), then averages the category means."""
    groups = [np.array([100.0 * float(r[key]) for r in records if int(r["category"]) == c]) for c in categories]
    groups = [g for g in groups if g.size]
    if not groups:
        return None
    rng = np.random.default_rng(seed)
    means = np.zeros(n_resamples)
    for g in groups:
        idx = rng.integers(0, g.size, size=(n_resamples, g.size))  # (n_resamples, n_category)
        means += g[idx].mean(axis=1)
    means /= len(groups)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def category_cis(records: Iterable[Mapping], categories: Mapping[int, str], n_resamples: int = 1000,
                 seed: int = 0, alpha: float = 0.05) -> dict:
    """Per-category bootstrap CIs over questions, in percent, of the report's metrics
    (metric_table.table_metrics(): F1 and BLEU-1).

    Returns {name: {"f1": [low, high], "bleu1": [low, high]}}; None for empty categories.
    """
    rows = list(records)
    out = {}
    for cat, name in categories.items():
        cat_rows = [r for r in rows if int(r["category"]) == int(cat)]
        out[name] = {
            key: (list(bootstrap_ci([100.0 * float(r[key]) for r in cat_rows], n_resamples, seed, alpha))
                  if cat_rows else None)
            for key in table_metrics()
        }
    return out


def metric_settings() -> dict:
    """Every metric setting that changes a number, for the run summary."""
    return {
        "metrics_version": METRICS_VERSION,
        "nltk_version": nltk.__version__,
        "bleu1": {"weights": [1, 0, 0, 0], "smoothing": "nltk SmoothingFunction().method1",
                  "tokenizer": bleu_tokenizer_name(), "lowercase": True},
    }

