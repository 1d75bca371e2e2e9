"""`logger=wandb`: offline by default, run files written, config/metrics/predictions/figures logged."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from scgmem.harness.logger import WandbLogger, flat_metrics, prediction_rows, resolve_mode
from tests.report import rec, write_run

ROOT = Path(__file__).resolve().parents[2]


def test_mode_is_offline_unless_the_user_says_otherwise(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert resolve_mode(None) == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_mode(None) == "disabled"
    assert resolve_mode("online") == "online"  # an explicit logger.mode wins
    with pytest.raises(ValueError, match="'cloud'"):
        WandbLogger(mode="cloud")


def test_logger_config_instantiates():
    cfg = OmegaConf.load(ROOT / "configs" / "logger" / "wandb.yaml")
    logger = instantiate(cfg)
    assert isinstance(logger, WandbLogger) and logger.mode is None and logger.project == "scgmem"


def test_flat_metrics_and_prediction_rows(tmp_path):
    records = [rec("conv-1", 0, 1, 1.0), rec("conv-1", 1, 1, 0.0), rec("conv-1", 2, 5, 0.5)]
    run = write_run(tmp_path / "r", model="m", method="scgmem", records=records)
    metrics = flat_metrics(json.loads((run / "summary.json").read_text()))
    assert metrics["multi_hop/f1"] == pytest.approx(50.0) and metrics["multi_hop/n"] == 2
    assert metrics["average/f1"] == pytest.approx(50.0)  # (50 + 50) / 2: empty categories do not count
    assert "temporal/f1" not in metrics  # no temporal questions: None is not logged
    assert metrics["tokens/answer/prompt_tokens"] == 300
    columns, rows = prediction_rows(run)
    assert columns[:3] == ["sample_id", "qa_index", "category"] and len(rows) == 3
    assert rows[0][columns.index("retrieved")] == "D1:1, D1:2"  # lists joined for the table


def test_offline_run_writes_its_files(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the default must not upload
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    (tmp_path / "wb").mkdir()
    run = write_run(tmp_path / "runs" / "multirun" / "2026-01-01_00-00-00" / "m" / "scgmem" / "k=5",
                    model="m", method="scgmem", records=[rec("conv-1", i, c, 0.5) for i, c in enumerate([1, 2, 4, 5])])
    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1])
    fig.savefig(run / "curve.png")
    config = {"model": {"name": "m"}, "method": {"k": 5}, "seed": 1234567}
    WandbLogger().log_run(config, json.loads((run / "summary.json").read_text()), run)

    offline = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, "one offline run directory under WANDB_DIR"
    assert not (run / "wandb").exists()  # WANDB_DIR takes precedence over the run directory
    # wandb's service process writes the offline file asynchronously, even after finish():
    # on a loaded machine the records can land a moment later. Wait for them (bounded).
    wanted = (b"multi_hop/f1", b"average/bleu1", b"tokens/answer/prompt_tokens", b"1234567", b"run_dir",
              b"2026-01-01_00-00-00")
    deadline = time.time() + 60
    while True:
        data = next(offline[0].glob("run-*.wandb")).read_bytes()
        if all(key in data for key in wanted) or time.time() > deadline:
            break
        time.sleep(0.5)
    for key in (b"multi_hop/f1", b"average/bleu1", b"tokens/answer/prompt_tokens", b"1234567", b"run_dir",
                b"2026-01-01_00-00-00"):  # metrics, the resolved config, and the sweep as the group
        assert key in data, key
    tables = list(offline[0].glob("files/media/table/predictions*.table.json"))
    assert len(tables) == 1 and len(json.loads(tables[0].read_text())["data"]) == 4
    assert list(offline[0].glob("files/media/images/figures/curve*.png"))


def test_log_report_writes_tables_and_images(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1])
    fig.savefig(tmp_path / "fig3.png")
    rows = [{"model": "m", "category": "multi_hop", "f1": 1.0}]
    WandbLogger().log_report("report/fig3", {"fig3": rows}, [tmp_path / "fig3.png"], out_dir=tmp_path / "out")
    offline = list((tmp_path / "out" / "wandb").glob("offline-run-*"))
    assert len(offline) == 1
    assert list(offline[0].glob("files/media/table/fig3*.table.json"))
    assert list(offline[0].glob("files/media/images/figures/fig3*.png"))
