"""A dataset plugs in through scgmem.api.DataSource and a config file in a search path."""
from __future__ import annotations

import json

from scgmem.api import DataSource
from scgmem.data.locomo import LoCoMoSource
from tests.data.toy_source import ToySource
from tests.harness.test_run_e2e import REQUIRED_FIELDS, scgmem_run


def test_locomo_and_the_toy_implement_the_protocol(locomo_path):
    assert isinstance(LoCoMoSource(str(locomo_path)), DataSource)
    assert isinstance(ToySource(), DataSource)
    assert not isinstance(object(), DataSource)


def test_a_toy_dataset_runs_end_to_end_from_its_own_config_folder(tmp_path):
    (tmp_path / "configs" / "data").mkdir(parents=True)
    (tmp_path / "configs" / "data" / "toy.yaml").write_text(
        "_target_: tests.data.toy_source.ToySource\nname: toy-1\nquestions_per_category: null\n")
    run_dir = tmp_path / "run"
    scgmem_run(f"hydra.searchpath=[file://{tmp_path / 'configs'}]", "data=toy", "method=last_turns", "method.k=5",
               "run.progress=false", f"hydra.run.dir={run_dir}", f"run.cache_dir={tmp_path / 'cache'}")
    records = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert [r["qa_index"] for r in sorted(records, key=lambda r: r["qa_index"])] == [0, 1, 2, 3]
    assert all(set(REQUIRED_FIELDS) <= set(r) and r["sample_id"] == "toy-1" for r in records)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["data"]["ingested_turns"] == {"toy-1": 5} and summary["n_questions"] == 4


def test_a_data_config_that_is_no_data_source_is_one_line(tmp_path):
    (tmp_path / "configs" / "data").mkdir(parents=True)
    (tmp_path / "configs" / "data" / "bad.yaml").write_text("_target_: collections.OrderedDict\n")
    proc = scgmem_run(f"hydra.searchpath=[file://{tmp_path / 'configs'}]", "data=bad", "method=last_turns",
                      f"hydra.run.dir={tmp_path / 'run'}", check=False)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "is not a DataSource" in lines[0], proc.stderr[-1500:]
