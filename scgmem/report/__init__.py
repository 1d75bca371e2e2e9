"""The paper's tables and figures from finished runs (`scgmem-report`, see docs/reproduce.md).

- collect: find and load run directories (summary.json, predictions.jsonl, .hydra/config.yaml)
- paper: the paper's published numbers (results/paper/*.csv) and display names
- tables: Table 1 / Table 2 beside the paper, bootstrap CIs, paired bootstrap; Markdown/CSV/LaTeX
- figures: Figure 3 (k), Figure 4 (hops), cost vs F1
- cli: the `scgmem-report` command
"""
