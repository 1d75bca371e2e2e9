"""The device check's dry run on the CPU: one tiny shape, two methods, a couple of questions."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_device_check_dry_run_on_cpu(tmp_path, locomo_path):
    env = {**os.environ, "DEVICE": "cpu", "SHAPES": "tiny", "METHODS": "full_context,scgmem",
           "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels"), "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", "scripts/device_check.sh", str(tmp_path / "out")], cwd=ROOT, env=env, check=True,
                   timeout=480)
    result = json.loads((tmp_path / "out" / "tiny.json").read_text())
    assert result["hidden_size"] == 64 and result["environment"]["device"] == "cpu"
    for method in ("full_context", "scgmem"):
        entry = result["methods"][method]
        assert entry["ok"] is True, entry.get("traceback")
        assert entry["n_questions"] > 0 and entry["generate_calls"] > 0 and entry["mean_rows_per_generate"] >= 1
        assert entry["prefill_tokens_per_s"] > 0 and entry["decode_tokens_per_s"] > 0
        assert entry["same_model"] is True
        assert entry["repetition_penalty"] == [1.0]  # the saved model's 1.05 was neutralised
