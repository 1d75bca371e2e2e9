"""experiments/conv26_vllm.py: the vLLM Table 1 against the local runs, per method and in total."""
import json

import pytest

from experiments.conv26_vllm import compare, markdown
from tests.report import rec, write_run


def _requests(run_dir, spans):
    with (run_dir / "requests.jsonl").open("w") as f:
        for start, end in spans:
            f.write(json.dumps({"v": 1, "server": "http://x/v1", "path": "/v1/completions", "body": {"prompt": "p"},
                                "start": start, "end": end, "prompt_tokens": 10, "completion_tokens": 2}) + "\n")


def test_paired_seconds_span_pauses_and_a_running_method(tmp_path):
    local, served = tmp_path / "local", tmp_path / "vllm"
    scores_local = [0.5, 0.0, 1.0, 0.5]
    scores_served = [0.5, 0.5, 1.0, 0.5]
    for method, t_local, t_served in (("scgmem", (100.0, 300.0), (20.0, 60.0)), ("rag", (0.0, 80.0), (0.0, 40.0))):
        write_run(local / method, model="local", method=method, timing=t_local,
                  records=[rec("conv-26", i, 1 + (i % 2) * 3, f) for i, f in enumerate(scores_local)])
        write_run(served / method, model="vllm", method=method, timing=t_served,
                  records=[rec("conv-26", i, 1 + (i % 2) * 3, f) for i, f in enumerate(scores_served)])
    _requests(served / "scgmem", [(1000.0, 1010.0), (1005.0, 1020.0)])
    _requests(served / "rag", [(1030.0, 1040.0), (2000.0, 2010.0)])  # resumed after a 960 s pause
    (served / "amem").mkdir()  # started, nothing answered yet
    (served / "amem" / "predictions.jsonl").write_text(json.dumps(rec("conv-26", 0, 1, 0.5)) + "\n")
    write_run(local / "amem", model="local", method="amem", timing=(1000.0, 0.0), records=[rec("conv-26", 0, 1, 0.5)])

    got = compare(served, local)
    rows = {r["method"]: r for r in got["rows"]}
    assert [r["method"] for r in got["rows"]] == ["scgmem", "rag", "amem"]  # Table 1's order
    assert rows["scgmem"]["paired"]["n"] == 4 and rows["scgmem"]["paired"]["diff"] > 0
    assert rows["scgmem"]["s_local"] == 400.0 and rows["scgmem"]["s_vllm"] == 80.0
    assert rows["scgmem"]["requests"]["requests"] == 2 and rows["scgmem"]["requests"]["mean_in_flight"] == pytest.approx(25 / 20)
    assert "paired" not in rows["amem"] and rows["amem"]["answered"] == 1
    assert got["finished"] == 2 and got["vllm_sum_s"] == 120.0
    assert got["local_sum_s"] == 400.0 + 80.0 + 1000.0
    assert rows["rag"]["requests"]["span_s"] == pytest.approx(20.0) and rows["rag"]["requests"]["paused_s"] == 960
    # 1000 -> 2010 over both methods' requests, less the pause 1040 -> 2000 (over PAUSE_S = 600 s)
    assert got["vllm_span_s"] == pytest.approx(50.0) and got["vllm_paused_s"] == pytest.approx(960.0)
    text = markdown(got)
    assert "| amem | 1 so far (running)" in text and "5.00" in text  # scgmem local / vLLM seconds


def test_packaged_requests_are_read_from_their_gzip(tmp_path):
    import gzip

    from experiments.conv26_vllm import requests

    _requests(tmp_path, [(10.0, 12.0), (11.0, 14.0)])
    raw = (tmp_path / "requests.jsonl").read_bytes()
    (tmp_path / "requests.jsonl").unlink()
    (tmp_path / "requests.jsonl.gz").write_bytes(gzip.compress(raw))
    got = requests(tmp_path)
    assert [(r["start"], r["end"]) for r in got] == [(10.0, 12.0), (11.0, 14.0)]
    assert requests(tmp_path / "absent") == []
