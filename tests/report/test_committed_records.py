"""Every committed run directory passes the checks a resume makes: each record of its
predictions.jsonl is a question of the data it names, with that question's text, gold and evidence,
and recomputes to its stored scores (scgmem/harness/stored_records.py). So the validation added by
issue 42 refuses none of the committed runs, and they resume and report as before."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.utils import instantiate

from scgmem.harness.pipeline import read_stored_predictions


ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "locomo10.json"
RUN_DIRS = sorted(p.parent for p in (ROOT / "results").rglob("predictions.jsonl") if (p.parent / "summary.json").is_file())


def _data_and_protocol(config: dict):
    from scgmem.data.locomo import LoCoMoSource

    data = {k: v for k, v in config["data"].items() if k != "_target_"}
    source = LoCoMoSource(**{**data, "path": str(ROOT / data["path"]) if not Path(data["path"]).is_absolute()
                             else data["path"]})
    node = {k: v for k, v in config["protocol"].items() if k not in ("chat", "judge")} | {"bertscore": False}
    # runs older than the scoring package named their protocol scgmem.protocols.<Class>
    node["_target_"] = "scgmem.scoring.protocols." + node["_target_"].rsplit(".", 1)[1]
    return source, instantiate(node, categories=source.scored)


def test_there_are_committed_runs():
    assert len(RUN_DIRS) >= 30, RUN_DIRS


@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_committed_run_records_match_the_data(run_dir):
    if not DATA.is_file():
        pytest.skip(f"{DATA} missing: run `make data`")
    config = json.loads((run_dir / "summary.json").read_text())["config"]
    if Path(config["data"]["path"]).name != DATA.name:
        pytest.skip(f"{run_dir}: data {config['data']['path']} is not committed")
    source, protocol = _data_and_protocol(config)
    conversations, _ = source.load()
    records = read_stored_predictions(run_dir, conversations, protocol, config["seed"],
                                      config["data"].get("questions_per_category"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(records) == summary["n_questions"]


