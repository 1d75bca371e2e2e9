"""Issue 32: job folder names, speed-only settings on resume, the paper's settings by default."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hydra._internal.config_loader_impl import get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from scgmem.harness.paper_settings import deviations, marks
from scgmem.harness.rundir import SPEED, check_run_dir

ROOT = Path(__file__).resolve().parents[2]


def test_folder_names_leave_out_experiment_launcher_caches_and_speed_keys():
    exclude = list(OmegaConf.load(ROOT / "configs/hydra/default.yaml").job.config.override_dirname.exclude_keys)
    overrides = OverridesParser.create().parse_overrides(
        ["+experiment=table1", "+launcher=joblib", "run.cache_dir=/shared/x", "model.max_batch_tokens=4096",
         "data.samples=[conv-26]"])
    assert get_overrides_dirname(overrides, exclude, ",", "=") == "data.samples=[conv-26]"
    assert {".".join(k) for k in SPEED} <= set(exclude)


def test_a_speed_setting_may_change_on_resume_and_is_recorded(tmp_path):
    cfg = {"model": {"name": "m", "max_batch_tokens": 8192, "dtype": "bfloat16"}, "method": {"k": 3}}
    check_run_dir(tmp_path, OmegaConf.create(cfg))
    (tmp_path / "predictions.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    cfg["model"]["max_batch_tokens"] = 4096
    check_run_dir(tmp_path, OmegaConf.create(cfg))
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["speed_changes"] == [{"predictions_before": 2, "from": {"model.max_batch_tokens": 8192},
                                        "to": {"model.max_batch_tokens": 4096}}]


def test_deviation_flags():
    paper = {"model": {"dtype": "float32"}, "embedder": {"name": "bge-m3"}}
    assert deviations(paper, {"protocol_settings": {"bleu1": {"tokenizer": "punkt"}}}) == []
    found = deviations({"model": {"dtype": "bfloat16"}, "embedder": {"name": "minilm"}},
                       {"protocol_settings": {"bleu1": {"tokenizer": "treebank_preserve_line"}}})
    assert marks(found) == "d,e,t"


def test_table1_on_a_paper_model_shows_float32_and_bge_m3():
    out = subprocess.run([sys.executable, "-m", "scgmem.run", "+experiment=table1", "model=qwen2.5-3b",
                          "method=amem", "--cfg", "job"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    cfg = OmegaConf.create(out)
    assert cfg.model.dtype == "float32" and cfg.embedder.path == "BAAI/bge-m3"
