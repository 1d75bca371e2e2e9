"""Scoring: answer prompts and references per protocol, reading the reply, the metrics.

- `protocols`      `protocol=amem|locomo`: prompts, references, per-question scores
- `answer_format`  reading the answer out of the model's reply (plain or JSON)
- `metrics`        F1, BLEU-1, evidence recall, aggregation and bootstrap CIs
- `bertscore`      optional BERTScore F1
"""
