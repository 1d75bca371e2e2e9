"""Optional BERTScore F1 per answer (`protocol.bertscore=true`), with the peers' settings.

Both peers report it beside F1 and BLEU-1, with the `bert_score` package:

- A-MEM (utils.py `calculate_bert_scores`): `bert_score([pred], [ref], lang="en")`, i.e.
  roberta-large, layer 17, no idf, no baseline rescaling; raw strings.
- LoCoMo (task_eval/evaluation.py `bert_score`): both strings through `normalize_answer`
  (commas dropped, lowercase, punctuation and a/an/the/and removed), `lang="en"`,
  `rescale_with_baseline=True`, and the F1 clamped at 0 (`max(0, F1)`).

The model is loaded once per run (bert_score's `BERTScorer`), not once per answer as the
peers' per-call `score()` does; the numbers are the same. Scores are in 0..1 like F1.

Example::

    scorer = BertScorer(rescale_with_baseline=True, normalize=True, clamp_at_zero=True)  # LoCoMo's
    scorer.f1(["Paris"], ["paris, france"])    # -> [0.63...]
"""
from __future__ import annotations

import re
import string
from pathlib import Path

from scgmem.llm.loading import ModelFilesMissing

PEER_MODEL = "roberta-large"  # bert_score's model for lang="en"
_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_answer(text: str) -> str:
    """LoCoMo's `normalize_answer` (no stemming): drop commas, lowercase, strip ASCII
    punctuation, remove a/an/the/and, collapse whitespace."""
    text = str(text).replace(",", "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


class BertScoreUnavailable(ModelFilesMissing):
    """The BERTScore model or its baseline cannot be loaded (no local copy and no hub access);
    scgmem-run prints it as one line."""


class BertScorer:
    """BERTScore F1 with a fixed model and the settings of one peer.

    Args:
        model: a bert_score model name (default roberta-large, as `lang="en"` picks) or a local
            Hugging Face model directory.
        num_layers: the layer whose embeddings are compared; None = bert_score's default for a
            known model name (roberta-large: 17). Required for a local directory.
        rescale_with_baseline: LoCoMo's rescaling, (F1 - b) / (1 - b) with bert_score's
            baseline b for (en, model); `baseline_path` gives a baseline file for other models.
        normalize: apply LoCoMo's `normalize_answer` to both strings first.
        clamp_at_zero: LoCoMo's `max(0, F1)` (a rescaled score can be negative).
        batch_size, device: passed to bert_score (device None = cuda if available, else cpu).
    """

    def __init__(self, model: str = PEER_MODEL, num_layers: int | None = None, *,
                 rescale_with_baseline: bool = False, baseline_path: str | None = None,
                 normalize: bool = False, clamp_at_zero: bool = False, batch_size: int = 64,
                 device: str | None = None) -> None:
        if num_layers is not None and (not isinstance(num_layers, int) or num_layers < 1):
            raise ValueError(f"bertscore num_layers must be a positive int or None, got {num_layers!r}")
        self.model = str(model)
        self.num_layers = num_layers
        self.rescale_with_baseline = bool(rescale_with_baseline)
        self.baseline_path = baseline_path
        self.normalize = bool(normalize)
        self.clamp_at_zero = bool(clamp_at_zero)
        self.batch_size = batch_size
        self.device = device
        self._scorer = None

    def load(self):
        """Load the model (and the baseline when rescaling) now; later calls reuse it."""
        if self._scorer is not None:
            return self._scorer
        from bert_score import BERTScorer
        from bert_score.utils import model2layers

        if self.num_layers is None and self.model not in model2layers:
            raise ValueError(f"bertscore: model {self.model!r} is not one bert_score knows: set "
                             "protocol.bertscore_layers=<layer>")
        try:
            self._scorer = BERTScorer(model_type=self.model, num_layers=self.num_layers, lang="en",
                                      rescale_with_baseline=self.rescale_with_baseline,
                                      baseline_path=self.baseline_path, batch_size=self.batch_size,
                                      device=self.device)
        except OSError as e:  # transformers' "can't load ... offline / not found"
            where = "directory" if Path(self.model).exists() else "model"
            raise BertScoreUnavailable(
                f"bertscore: cannot load the {where} {self.model!r} ({type(e).__name__}); give a local copy with "
                "protocol.bertscore_model=<dir> protocol.bertscore_layers=<layer>, or set "
                "protocol.bertscore=false") from None
        if self.rescale_with_baseline:
            try:  # read now, so that a missing baseline fails before the first answer
                self._scorer.baseline_vals  # noqa: B018
            except ValueError as e:
                self._scorer = None
                raise BertScoreUnavailable(f"bertscore: {e}; give one with protocol.bertscore_baseline=<file>, "
                                           "or set protocol.bertscore=false") from None
        return self._scorer

    def f1(self, predictions: list[str], references: list[str]) -> list[float]:
        """BERTScore F1 of each (prediction, reference) pair."""
        if len(predictions) != len(references):
            raise ValueError(f"bertscore: {len(predictions)} predictions for {len(references)} references")
        if not predictions:
            return []
        prep = normalize_answer if self.normalize else str
        pairs = [(prep(p).strip(), prep(r).strip()) for p, r in zip(predictions, references)]
        # An empty side scores 0: bert_score's empty-string path fails under transformers >= 5,
        # and A-MEM's code scores any BERTScore failure as 0.
        scored = [i for i, (p, r) in enumerate(pairs) if p and r]
        scores = [0.0] * len(pairs)
        if scored:
            _, _, f1 = self.load().score([pairs[i][0] for i in scored], [pairs[i][1] for i in scored], verbose=False)
            for i, value in zip(scored, f1.tolist()):
                scores[i] = float(value)
        return [max(0.0, s) for s in scores] if self.clamp_at_zero else scores

    def settings(self) -> dict:
        return {"model": self.model, "num_layers": self._scorer.num_layers if self._scorer else self.num_layers,
                "rescale_with_baseline": self.rescale_with_baseline, "baseline_path": self.baseline_path,
                "normalize": "locomo normalize_answer" if self.normalize else None,
                "clamp_at_zero": self.clamp_at_zero, "idf": False, "package": "bert_score"}
