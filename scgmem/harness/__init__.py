"""The runner: config -> data -> method per conversation -> answers -> predictions.jsonl and summary.json.

- `run`         the Hydra app (`scgmem-run`): instantiates the config and hands it to the pipeline
- `cli_checks`  override checks before Hydra starts (one-line errors)
- `pipeline`    ingest, recall and answer per conversation; resumable, batched answering
- `cache`       built memories on disk, keyed by what they depend on
- `records`     predictions.jsonl and atomic JSON writes
- `rundir`      refuses to resume a run directory made by another config
- `summary`     summary.json: scores, costs, timing
- `logger`      experiment tracking (`logger=none|wandb`)
"""
