"""Answer and scoring protocols, selected by `protocol=amem|locomo` (docs/scoring.md).

A protocol turns (question, memory context) into the answer prompt, names the reference
the answer is scored against, and scores it. The field scores LoCoMo two ways:

- `AmemProtocol` (default; the paper's Table 1 and its baseline numbers follow A-MEM's
  evaluation code, WujiangXu/A-mem test_advanced.py + utils.py): per-category prompts,
  sampled answers (T=0.7; 0.5 for category 5), set-F1 and BLEU-1, and category 5 scored
  against `adversarial_answer` (kept for fidelity, flagged: A-mem issue #8).
- `LocomoProtocol` (official LoCoMo task_eval/evaluate_gpts.py + evaluation.py): one QA
  prompt, greedy answers, stemmed multiset F1, comma-split F1 for category 1, and
  category 5 credited when the answer says "not mentioned"/"no information available".

Rules are keyed by the LoCoMo category *number* in the data file, as in both upstream
codes; the `categories` mapping (config `data.categories`) only names them.

Options shared by both (docs/scoring.md):

- `answer_format`: "text" (the reply is the answer) or "json" (A-MEM's way: a system message
  "You must respond with a JSON object.", the answer schema {"answer": string} stated in the
  prompt, the reply primed with '{"answer": "'; the `answer` field is extracted, and a reply
  that does not parse falls back to its text and is counted). Default: json for amem, text
  for locomo, each matching its upstream code.
- `bertscore`: BERTScore F1 per answer (scgmem.scoring.bertscore), with the protocol's peer settings.

Example::

    protocol = AmemProtocol(categories={1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"})
    prompt = protocol.build_prompt(qa, recall.context, rng)       # AnswerPrompt
    text = llm.render(prompt.messages, assistant_prefix=prompt.assistant_prefix)
    [[gen]] = llm.generate([text], max_new_tokens=prompt.max_new_tokens,
                           temperature=prompt.temperature, seeds=[seed])
    answer, extra = protocol.extract_answer(gen.text, prompt)     # extra: {"reply", "answer_parsed"} (json)
    scores = protocol.score(qa, answer, options=prompt.options)   # {"f1", "bleu1"} in 0..1 (metric_table.py)
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from scgmem.api import OFFICIAL_CATEGORIES, QA
from scgmem.scoring import metrics
from scgmem.scoring.metric_table import answer_metrics
from scgmem.scoring.answer_format import (ANSWER_FORMATS, JSON_PREFIX, JSON_SCHEMA_LINE, JSON_SYSTEM,
                                          answer_format_note, extract_json_answer)
from scgmem.scoring.bertscore import PEER_MODEL, BertScorer
from scgmem.scoring.cat5 import NOT_MENTIONED, cat5_distractor, resolve_option, says_not_mentioned, seeded_options

# The paper's scored columns: the official numbers without category 3 (open domain).
DEFAULT_CATEGORIES = {c: n for c, n in OFFICIAL_CATEGORIES.items() if c != 3}


@dataclass
class AnswerPrompt:
    """One answer call.

    Attributes:
        messages: chat messages for `LLM.render`.
        temperature: 0 -> greedy; > 0 -> sampled (the runner supplies the seed).
        max_new_tokens: cap on the answer length.
        options: the category-5 options in the order shown (recorded in predictions);
            None for other categories.
        assistant_prefix: text the reply starts with (`LLM.render(..., assistant_prefix=)`);
            the generated text continues it.
    """

    messages: list[dict]
    temperature: float
    max_new_tokens: int
    options: list[str] | None = None
    assistant_prefix: str = ""


def _answer(qa: QA) -> str:
    if qa.answer is None:
        raise ValueError(f"{qa.sample_id} qa[{qa.index}]: category-{qa.category} question has no answer")
    return str(qa.answer)


def _user(content: str) -> list[dict]:
    # The whole prompt is one user message. LoCoMo's code sends nothing else; A-MEM's adds a
    # system message and the schema, which answer_format=json adds (`Protocol._prompt`).
    return [{"role": "user", "content": content}]


class Protocol(abc.ABC):
    """Base class: prompt building, the scoring reference, per-question scores, settings.

    Args:
        categories: LoCoMo number -> column name (config `data.categories`); default the
            paper's four (official numbers, category 3 excluded).
        temperature: None -> the protocol's own values; a number -> that temperature for
            every category (0 = greedy).
        max_new_tokens: cap on each answer.
        answer_format: "text" or "json" (module docstring); None -> the protocol's default.
        bertscore: also score BERTScore F1 per answer (off by default: the peers' model,
            roberta-large, is a hub download). bertscore_model / bertscore_layers /
            bertscore_baseline: another model (a local directory needs its layer) or baseline file.
    """

    name: str = "base"
    default_answer_format = "text"

    def __init__(self, categories: Mapping[int, str] | None = None, temperature: float | None = None,
                 max_new_tokens: int = 50, answer_format: str | None = None, bertscore: bool = False,
                 bertscore_model: str = PEER_MODEL, bertscore_layers: int | None = None,
                 bertscore_baseline: str | None = None) -> None:
        if categories is None:
            categories = DEFAULT_CATEGORIES
        try:
            self.categories = {int(k): str(v) for k, v in categories.items()}
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"categories must map LoCoMo numbers to names, got {categories!r}") from None
        bad = [k for k in self.categories if k not in OFFICIAL_CATEGORIES]
        if bad or not self.categories:
            raise ValueError(f"categories keys must be LoCoMo numbers 1-5, got {dict(self.categories)!r}")
        if temperature is not None and (not isinstance(temperature, (int, float)) or temperature < 0):
            raise ValueError(f"temperature must be None or a number >= 0, got {temperature!r}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        answer_format = self.default_answer_format if answer_format is None else answer_format
        if answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
        self.temperature = None if temperature is None else float(temperature)
        self.max_new_tokens = max_new_tokens
        self.answer_format = answer_format
        self.bertscorer = None
        if bertscore:  # loaded now, so that missing weights fail before any answer is generated
            self.bertscorer = self._bertscorer(bertscore_model, bertscore_layers, bertscore_baseline)
            self.bertscorer.load()

    def _bertscorer(self, model: str, layers: int | None, baseline: str | None) -> BertScorer:
        """BERTScore with this protocol's peer settings (A-MEM's by default)."""
        return BertScorer(model, layers, baseline_path=baseline)

    # -- per question ----------------------------------------------------------------------
    @abc.abstractmethod
    def own_temperature(self, category: int) -> float:
        """The protocol's temperature for `category` when no override is set."""

    def temperature_for(self, category: int) -> float:
        return self.temperature if self.temperature is not None else self.own_temperature(category)

    @abc.abstractmethod
    def build_prompt(self, qa: QA, context: str, rng: np.random.Generator) -> AnswerPrompt:
        """The answer prompt: `context` (already rendered by the memory method) comes before
        the question. `rng` is drawn from only for category 5 (option order)."""

    @abc.abstractmethod
    def reference(self, qa: QA) -> str:
        """The string the answer is scored against (written to predictions.jsonl)."""

    def score(self, qa: QA, prediction: str, options: Sequence[str] | None = None) -> dict:
        """Every answer metric of the metric table (scgmem/scoring/metric_table.py), each in 0..1:
        those with this protocol's own rule from `own_scores`, the others from their table function.
        `options` (AnswerPrompt.options) matters only where the protocol maps an option letter back
        to its text."""
        scores = self.own_scores(qa, prediction, options)
        for metric in answer_metrics():
            if metric.name not in scores:
                if metric.function is None:
                    raise ValueError(f"{type(self).__name__}: answer metric {metric.name!r} has no "
                                     "function in scgmem/scoring/metric_table.py and the protocol does not score it")
                scores[metric.name] = metric.function(prediction, self.reference(qa))
        return {metric.name: scores[metric.name] for metric in answer_metrics()}

    @abc.abstractmethod
    def own_scores(self, qa: QA, prediction: str, options: Sequence[str] | None = None) -> dict:
        """The answer metrics this protocol scores by its own rules: {"f1", "bleu1"} in 0..1."""

    def _prompt(self, content: str, category: int, options: list[str] | None) -> AnswerPrompt:
        """The AnswerPrompt of a finished user prompt, in this protocol's answer format."""
        if self.answer_format == "json":
            messages = [{"role": "system", "content": JSON_SYSTEM}, *_user(content + JSON_SCHEMA_LINE)]
            return AnswerPrompt(messages, self.temperature_for(category), self.max_new_tokens, options, JSON_PREFIX)
        return AnswerPrompt(_user(content), self.temperature_for(category), self.max_new_tokens, options)

    def extract_answer(self, reply: str, prompt: AnswerPrompt) -> tuple[str, dict]:
        """(the answer to score, fields for the prediction record) from the generated `reply`.

        text: the reply itself, no fields. json: the `answer` field of prefix + reply; if that
        does not parse, the reply's own text up to its closing quote (all of it if none), with
        {"reply": the raw reply, "answer_parsed": False} (summary: `answer_format.unparsed`).
        """
        if self.answer_format == "text":
            return reply, {}
        return extract_json_answer(reply, prompt.assistant_prefix)

    def bertscore_f1(self, qas: Sequence[QA], answers: Sequence[str]) -> list[float] | None:
        """BERTScore F1 (0..1) of each answer against `reference(qa)`, or None when it is off."""
        if self.bertscorer is None:
            return None
        return self.bertscorer.f1(list(answers), [self.reference(q) for q in qas])

    # -- for the summary -------------------------------------------------------------------
    def settings(self) -> dict:
        """Every setting that changes a number (written into summary.json)."""
        return {
            "protocol": self.name,
            "categories": {str(k): v for k, v in sorted(self.categories.items())},
            "temperature_override": self.temperature,
            "temperature": {str(c): self.temperature_for(c) for c in sorted(self.categories)},
            "max_new_tokens": self.max_new_tokens,
            "answer_format": self.answer_format,
            "answer_format_note": answer_format_note(self.answer_format),
            "bertscore": self.bertscorer.settings() if self.bertscorer else None,
            "averages": {"average": "unweighted mean of the category means (the paper's Average)",
                         "overall_weighted": "mean over all scored questions, i.e. categories weighted by "
                                             "question count (LoCoMo's Overall)",
                         "average_1_4": "the paper's Average over the scored categories other than 5 "
                                        "(scgmem/scoring/cat5.py)"},
            **metrics.metric_settings(),
        }

    def _check_category(self, qa: QA) -> int:
        if qa.category not in OFFICIAL_CATEGORIES:
            raise ValueError(f"{qa.sample_id} qa[{qa.index}]: category must be 1-5, got {qa.category!r}")
        return qa.category


class AmemProtocol(Protocol):
    """A-MEM's answer prompts and scoring (the paper's Table 1 protocol).

    Args:
        base_temperature: categories 1-4 (A-MEM: `temperature = 0.7`).
        cat5_temperature: category 5 (A-MEM: `--temperature_c5`, default 0.5).
        cat5_reference: "adversarial" (A-MEM: category 5 scored against adversarial_answer,
            which rewards taking the trap; reported upstream as a bug, A-mem issue #8; kept
            as the default for fidelity to the paper) or "answer" (the item's `answer` if
            the file has one, else "Not mentioned in the conversation": the correct choice).
            In locomo10.json two category-5 items have an `answer`, "No" (conv-26 qa 167
            and 178): under "answer" they are scored against "No", an answer neither
            option shows, so picking either option scores 0 (docs/scoring.md).
        Other arguments (answer_format default "json", as A-MEM's code; bertscore with
        A-MEM's settings): see `Protocol`.
    """

    name = "amem"
    default_answer_format = "json"
    CAT5_REFERENCES = ("adversarial", "answer")

    def __init__(self, categories: Mapping[int, str] | None = None, temperature: float | None = None,
                 max_new_tokens: int = 50, base_temperature: float = 0.7, cat5_temperature: float = 0.5,
                 cat5_reference: str = "adversarial", **options) -> None:
        super().__init__(categories, temperature, max_new_tokens, **options)
        for arg, value in (("base_temperature", base_temperature), ("cat5_temperature", cat5_temperature)):
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{arg} must be a number >= 0, got {value!r}")
        if cat5_reference not in self.CAT5_REFERENCES:
            raise ValueError(f"cat5_reference must be one of {self.CAT5_REFERENCES}, got {cat5_reference!r}")
        self.base_temperature = float(base_temperature)
        self.cat5_temperature = float(cat5_temperature)
        self.cat5_reference = cat5_reference

    def own_temperature(self, category: int) -> float:
        return self.cat5_temperature if category == 5 else self.base_temperature

    def build_prompt(self, qa: QA, context: str, rng: np.random.Generator) -> AnswerPrompt:
        # A-MEM's wording, shortened; the context leads so the question sits next to the answer.
        category = self._check_category(qa)
        head = f"Context:\n{context}\n\n"
        options = None
        if category == 5:
            options = seeded_options(qa, rng)
            body = (f"Based on the context above, answer the following question. {qa.question}\n"
                    f"Select the correct answer: {options[0]} or {options[1]}\nShort answer:")
        elif category == 2:
            body = ("Based on the context above, answer the following question. Use the DATE of the "
                    "CONVERSATION to answer with an approximate date. Give the shortest possible answer, "
                    "using words from the conversation where possible, with no subject.\n"
                    f"Question: {qa.question}\nShort answer:")
        else:  # 1, 3, 4
            body = ("Based on the context above, write an answer in the form of a short phrase for the "
                    "following question. Answer with exact words from the context whenever possible.\n"
                    f"Question: {qa.question}\nShort answer:")
        return self._prompt(head + body, category, options)

    def reference(self, qa: QA) -> str:
        if self._check_category(qa) != 5:
            return _answer(qa)
        if self.cat5_reference == "adversarial":
            return cat5_distractor(qa)  # A-MEM load_dataset.py final_answer
        return str(qa.answer) if qa.answer is not None else NOT_MENTIONED

    def own_scores(self, qa: QA, prediction: str, options: Sequence[str] | None = None) -> dict:
        ref = self.reference(qa)
        return {"f1": metrics.f1_amem(prediction, ref), "bleu1": metrics.bleu1(prediction, ref)}

    def settings(self) -> dict:
        note = ("category 5 is scored against adversarial_answer, as A-MEM's code does: this rewards "
                "choosing the trap (reported upstream: https://github.com/WujiangXu/A-mem/issues/8); "
                "kept for fidelity to the paper's Table 1") if self.cat5_reference == "adversarial" else (
                "category 5 is scored against the item's answer, else 'Not mentioned in the conversation' "
                "(differs from A-MEM's code and the paper's Table 1); the 2 items whose answer is 'No' "
                "(conv-26 qa 167, 178) are scored against 'No', which neither option shows")
        return super().settings() | {
            "f1_variant": "amem_token_set (lowercase; . , ! ? -> space; whitespace split; sets)",
            "cat5_reference": self.cat5_reference,
            "cat5_reference_note": note,
            "cat5_options": f"'{NOT_MENTIONED}' and adversarial_answer, order seeded (rng.random() < 0.5 "
                            "puts 'Not mentioned' first)",
        }


class LocomoProtocol(Protocol):
    """The official LoCoMo task_eval protocol (greedy; stemmed multiset F1).

    Scoring per category:
        1: `f1_locomo_multi` (comma-split); 2, 4: `f1_locomo`; 3: `f1_locomo` with the
        gold cut at the first ';'; 5: f1 = 1.0 if the answer (after LoCoMo's option-letter
        mapping) contains "not mentioned" or "no information available", else 0.0.
        BLEU-1 is not part of LoCoMo's code; it is reported for comparability with the
        same nltk settings as protocol=amem, against `reference(qa)` (category 5:
        "Not mentioned in the conversation").
        answer_format defaults to "text" (evaluate_gpts.py reads the reply as the answer);
        bertscore uses LoCoMo's settings (normalized strings, baseline rescaling, clamp at 0).
    """

    name = "locomo"

    def _bertscorer(self, model: str, layers: int | None, baseline: str | None) -> BertScorer:
        return BertScorer(model, layers, baseline_path=baseline, rescale_with_baseline=True, normalize=True,
                          clamp_at_zero=True)

    def own_temperature(self, category: int) -> float:
        return 0.0  # evaluate_gpts.py calls the model with temperature=0

    def build_prompt(self, qa: QA, context: str, rng: np.random.Generator) -> AnswerPrompt:
        # QA_PROMPT / QA_PROMPT_CAT_5 of evaluate_gpts.py, placed after the context.
        category = self._check_category(qa)
        options = None
        if category == 5:
            options = seeded_options(qa, rng)
            body = ("Based on the above context, answer the following question.\n\n"
                    f"Question: {qa.question} Select the correct answer: (a) {options[0]} (b) {options[1]}. "
                    "Short answer:")
        else:
            question = qa.question
            if category == 2:
                question += " Use DATE of CONVERSATION to answer with an approximate date."
            body = ("Based on the above context, write an answer in the form of a short phrase for the "
                    "following question. Answer with exact words from the context whenever possible.\n\n"
                    f"Question: {question} Short answer:")
        return self._prompt(f"{context}\n\n{body}", category, options)

    def reference(self, qa: QA) -> str:
        category = self._check_category(qa)
        if category == 5:
            return NOT_MENTIONED
        answer = _answer(qa)
        return answer.split(";")[0].strip() if category == 3 else answer

    resolve_option = staticmethod(resolve_option)  # LoCoMo's get_cat_5_answer (scgmem/scoring/cat5.py)

    def own_scores(self, qa: QA, prediction: str, options: Sequence[str] | None = None) -> dict:
        category = self._check_category(qa)
        ref = self.reference(qa)
        if category == 5:
            said = self.resolve_option(prediction, options).lower()
            f1 = 1.0 if says_not_mentioned(said) else 0.0  # LoCoMo's refusal rule (scgmem/scoring/cat5.py)
            return {"f1": f1, "bleu1": metrics.bleu1(said, ref)}
        f1 = metrics.f1_locomo_multi(prediction, ref) if category == 1 else metrics.f1_locomo(prediction, ref)
        return {"f1": f1, "bleu1": metrics.bleu1(prediction, ref)}

    def settings(self) -> dict:
        return super().settings() | {
            "f1_variant": "locomo_multiset_stemmed (drop commas, lowercase, strip ASCII punctuation, "
                          "remove a/an/the/and, Porter stem; Counter overlap)",
            "cat1_scoring": "comma-split: mean over gold parts of the best F1 over predicted parts",
            "cat3_reference": "gold cut at the first ';'",
            "cat5_reference": "not_mentioned",
            "cat5_scoring": "f1 = 1 if the answer (option letters mapped to text) contains 'not mentioned' "
                            "or 'no information available', else 0; bleu1 against "
                            f"'{NOT_MENTIONED}'",
            "cat5_options": f"(a)/(b): '{NOT_MENTIONED}' and adversarial_answer, order seeded "
                            "(rng.random() < 0.5 puts 'Not mentioned' first)",
            "bleu1_note": "not in LoCoMo's code; same nltk BLEU-1 as protocol=amem, for comparability",
        }
