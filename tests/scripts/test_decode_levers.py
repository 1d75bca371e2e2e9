"""The decode-lever grid of scripts/device_throughput.py (--levers), dry run on the CPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_levers(tmp_path, modes: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "scripts.device_throughput", "--out", str(tmp_path), "--device", "cpu",
                    "--shapes", "tiny", "--batches", "1,2", "--prompt", "24", "--new", "3", "--levers",
                    "--lever-prompts", "24,40", "--lever-modes", modes, "--work", str(tmp_path / "work")],
                   cwd=ROOT, env=env, check=True, timeout=600)
    [shape] = json.loads((tmp_path / "throughput.json").read_text())["shapes"]
    assert set(shape["batches"]) == {"default", "torch_choice"}  # the plain measurements are still there
    return shape


def test_lever_grid_dry_run(tmp_path):
    shape = run_levers(tmp_path, "eager,static")
    levers = shape["levers"]
    assert set(levers) == {"sdpa", "gqa_sdpa"} and all(set(m) == {"eager", "static"} for m in levers.values())
    for attention, modes in levers.items():
        for mode, cells in modes.items():
            assert set(cells) == {"24x1", "24x2", "40x1", "40x2"}
            assert all(c["step_ms"] >= 0 and c["generate_s"] > 0 for c in cells.values())
            assert all(("static_decode" in c) == (mode == "static") for c in cells.values())
    assert shape["lever_ratios"]["sdpa/eager"]["40x2"] == 1.0
    assert set(shape["lever_ratios"]) == {"sdpa/eager", "sdpa/static", "gqa_sdpa/eager", "gqa_sdpa/static"}


@pytest.mark.slow
def test_lever_grid_compiled_dry_run(tmp_path):
    shape = run_levers(tmp_path, "compiled")
    for modes in shape["levers"].values():
        assert all(c["static_decode"]["compile"] and c["static_decode"]["compiled_graphs"] >= 1
                   for c in modes["compiled"].values())


def test_bad_lever_names_fail_in_one_line():
    from scripts.decode_levers import measure_levers

    with pytest.raises(ValueError, match="--lever-modes"):
        measure_levers(None, "", [1], [8], ["sdpa"], ["fast"], 3, None, {}, None)
    with pytest.raises(ValueError, match="--lever-attention"):
        measure_levers(None, "", [1], [8], ["flash"], ["eager"], 3, None, {}, None)
