"""The LLM judge ("J"): one label, CORRECT or WRONG, per prediction and run, and their aggregation.

Any backend of the project judges: the local `scgmem.llm.LLM` (an HF folder, a hub id or the
embedded GGUF), `scgmem.llm.served.openai_compatible.OpenAICompatibleLLM`, or the scripted fake. The
prompt is `scgmem.scoring.judge_prompt` (pinned, versioned). Runs are independent judgements of
the same predictions: at temperature 0 every run is greedy (a local model gives the same labels
in each run, so their std is 0; a server need not); above 0 each (question, run) is sampled with
its own seed, which the caller derives (`scgmem.harness.judging`).

Example::

    judge = Judge(llm, runs=3)
    items = [judge.item(record) for record in predictions]        # gold: the record's reference
    verdicts = judge.label(items)                                  # one run, batched
    rows = [{**it.row(), "run": 0, "label": v.label, "parsed": v.parsed} for it, v in zip(items, verdicts)]
    judge_scores(rows, {1: "multi_hop", 2: "temporal"})            # means, stds over runs, CIs
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from scgmem.scoring.judge_prompt import CORRECT, judge_messages, parse_label, prompt_settings
from scgmem.scoring.metrics import average_ci, bootstrap_ci

# Category 5's gold for the judge. A-MEM's protocol scores it against the trap answer
# (adversarial_answer); judging that would credit taking the trap, so by default the judge
# compares with what the question's right option says (LoCoMo's own rule).
CAT5_GOLDS = ("not_mentioned", "reference")
NOT_MENTIONED = "Not mentioned in the conversation"


@dataclass
class JudgeItem:
    """One prediction to judge."""

    sample_id: str
    qa_index: int
    category: int
    question: str
    gold: str
    prediction: str

    def row(self) -> dict:
        return {"sample_id": self.sample_id, "qa_index": self.qa_index, "category": self.category}


@dataclass
class Verdict:
    label: str  # CORRECT or WRONG (an unparsed reply is WRONG)
    parsed: bool
    reply: str


class Judge:
    """Args:
        llm: any backend with `render` and `generate` (scgmem.llm.protocol.LanguageModel).
        runs: independent judgements per prediction (default 3).
        temperature: 0 = greedy (default); > 0 samples with the seeds `label` is given.
        max_new_tokens: cap on a reply (one word is asked for; room for "**CORRECT**" or JSON).
        cat5_gold: "not_mentioned" (default: category 5 judged against "Not mentioned in the
            conversation") or "reference" (against the record's reference, A-MEM's trap answer
            under protocol=amem).
    """

    def __init__(self, llm, runs: int = 3, temperature: float = 0.0, max_new_tokens: int = 16,
                 cat5_gold: str = "not_mentioned") -> None:
        if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
            raise ValueError(f"judge.runs must be a positive integer, got {runs!r}")
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"judge.temperature must be a number >= 0, got {temperature!r}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"judge.max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if cat5_gold not in CAT5_GOLDS:
            raise ValueError(f"judge.cat5_gold must be one of {CAT5_GOLDS}, got {cat5_gold!r}")
        self.llm, self.runs, self.temperature = llm, runs, float(temperature)
        self.max_new_tokens, self.cat5_gold = max_new_tokens, cat5_gold

    def item(self, record: Mapping) -> JudgeItem:
        """The JudgeItem of a predictions.jsonl record (its gold: `reference`, category 5 by `cat5_gold`)."""
        try:
            category = int(record["category"])
            gold = NOT_MENTIONED if category == 5 and self.cat5_gold == "not_mentioned" else record["reference"]
            return JudgeItem(str(record["sample_id"]), int(record["qa_index"]), category, str(record["question"]),
                             str(gold), str(record.get("prediction") or ""))
        except KeyError as e:
            raise ValueError(f"prediction record {record.get('sample_id')} qa {record.get('qa_index')}: "
                             f"no {e.args[0]!r} field") from None

    def label(self, items: Sequence[JudgeItem], seeds: Sequence[int] | None = None) -> list[Verdict]:
        """One run over `items`, in one `generate` call (the backend batches it). `seeds`: one
        per item when sampling (temperature > 0); ignored when greedy, so a local model's memo
        answers a repeated greedy run without recomputing it."""
        if not items:
            return []
        prompts = [self.llm.render(judge_messages(i.question, i.gold, i.prediction)) for i in items]
        sampled = self.temperature > 0
        if sampled and (seeds is None or len(seeds) != len(items)):
            raise ValueError("a sampled judge needs one seed per item")
        with self.llm.usage.under("judge"):
            gens = self.llm.generate(prompts, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                     seeds=list(seeds) if sampled else None)
        out = []
        for [gen, *_] in gens:
            label, parsed = parse_label(gen.text)
            out.append(Verdict(label, parsed, gen.text))
        return out

    def settings(self) -> dict:
        """Everything that changes a label (judge.json, summary.json `judge.settings`)."""
        return {"model": self.llm.name, "model_source": getattr(self.llm, "source", None),
                "model_id": getattr(self.llm, "model_id", None), "runs": self.runs,
                "temperature": self.temperature, "max_new_tokens": self.max_new_tokens,
                "cat5_gold": self.cat5_gold, **prompt_settings()}


def _spread(values: list[float]) -> dict:
    """Mean and sample std (ddof=1; None with one run) of per-run accuracies, in percent."""
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()) if arr.size else None,
            "std": float(arr.std(ddof=1)) if arr.size > 1 else None, "runs": [float(v) for v in arr]}


def judge_scores(rows: Iterable[Mapping], categories: Mapping[int, str], n_resamples: int = 1000,
                 seed: int = 0) -> dict:
    """Judge accuracy (percent) per category, the paper-style average and LoCoMo's weighted overall.

    Args:
        rows: one per (question, run): sample_id, qa_index, category, run, label, parsed.
        categories: LoCoMo number -> column name; rows of other categories are left out.

    Returns:
        {"n_runs", "categories": {name: {"n", "mean", "std", "runs", "ci"}}, "average": {...},
         "overall_weighted": {...}, "unparsed": {"count", "of"}}. Per run r: accuracy = share of
        CORRECT over the category's questions; "mean"/"std" are over runs (std with ddof=1, None
        for one run). "ci" is a percentile bootstrap over questions (`metrics.bootstrap_ci`; for
        the average, `metrics.average_ci`) of each question's share of CORRECT runs. "average"
        is the unweighted mean of the category accuracies, per run.
    """
    cats = {int(k): str(v) for k, v in categories.items()}
    by_q: dict[tuple, dict[int, bool]] = {}
    cat_of: dict[tuple, int] = {}
    unparsed = total = 0
    for r in rows:
        if int(r["category"]) not in cats:
            continue
        key = (str(r["sample_id"]), int(r["qa_index"]))
        cat_of[key] = int(r["category"])
        by_q.setdefault(key, {})[int(r["run"])] = r["label"] == CORRECT
        total += 1
        unparsed += 0 if r.get("parsed", True) else 1
    runs = sorted({run for labels in by_q.values() for run in labels})
    per_q = [{"category": cat_of[k], "judge": float(np.mean(list(v.values())))} for k, v in sorted(by_q.items())]
    out: dict = {"n_runs": len(runs), "categories": {}, "unparsed": {"count": unparsed, "of": total}}

    def accuracy(keys: list[tuple], run: int) -> float | None:
        seen = [by_q[k][run] for k in keys if run in by_q[k]]
        return 100.0 * float(np.mean(seen)) if seen else None

    per_run_cat: dict[int, list[float | None]] = {}
    for num, name in cats.items():
        keys = [k for k in by_q if cat_of[k] == num]
        per_run_cat[num] = [accuracy(keys, run) for run in runs] if keys else []
        values = [100.0 * q["judge"] for q in per_q if q["category"] == num]
        out["categories"][name] = {"n": len(keys), **_spread([v for v in per_run_cat[num] if v is not None]),
                                   "ci": list(bootstrap_ci(values, n_resamples, seed)) if values else None}
    scored = [num for num in cats if per_run_cat[num]]
    averages = []
    for i in range(len(runs)):  # a run that missed a whole category averages the others
        present = [per_run_cat[c][i] for c in scored if per_run_cat[c][i] is not None]
        if present:
            averages.append(float(np.mean(present)))
    ci = average_ci(per_q, {c: cats[c] for c in scored}, "judge", n_resamples, seed) if scored else None
    out["average"] = {**_spread(averages), "ci": list(ci) if ci else None}
    every = list(by_q)
    overall = [v for v in (accuracy(every, run) for run in runs) if v is not None]
    values = [100.0 * q["judge"] for q in per_q]
    out["overall_weighted"] = {"n": len(every), **_spread(overall),
                               "ci": list(bootstrap_ci(values, n_resamples, seed)) if values else None}
    return out


def agreement(human: Sequence[str], judged: Sequence[str]) -> dict:
    """Agreement of a judge's labels with hand labels (same order): the share of equal labels,
    Cohen's kappa (None when either side used one label only, where it is undefined), and the
    confusion counts keyed "human/judge" (e.g. "WRONG/CORRECT": the judge credited a wrong answer)."""
    if len(human) != len(judged) or not human:
        raise ValueError(f"agreement needs two non-empty label lists of one length, got {len(human)} and {len(judged)}")
    n = len(human)
    observed = sum(h == j for h, j in zip(human, judged)) / n
    labels = sorted(set(human) | set(judged))
    expected = sum((list(human).count(lab) / n) * (list(judged).count(lab) / n) for lab in labels)
    kappa = None if expected == 1.0 or len(set(human)) < 2 or len(set(judged)) < 2 else \
        (observed - expected) / (1.0 - expected)
    confusion: dict[str, int] = {}
    for h, j in zip(human, judged):
        confusion[f"{h}/{j}"] = confusion.get(f"{h}/{j}", 0) + 1
    return {"n": n, "agreement": observed, "kappa": kappa, "confusion": dict(sorted(confusion.items()))}
