"""Issue 42, run.json: a run.json that is invalid, empty, of the wrong shape or without its config
is refused in one line, never treated as absent and overwritten (which adopted the old predictions
under a new config); nothing in the directory changes (scgmem/harness/rundir.py, read_run_json)."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from scgmem.harness.rundir import check_run_dir
from tests.harness.untrusted_support import DATA, FAST, one_line_error, scgmem_run

CONFIG = OmegaConf.create({"run": {"cache_dir": "/c", "progress": True}, "method": {"k": 35}, "seed": 0})

BAD = {
    "empty": "",
    "not JSON": "{config: 1",
    "a list": "[1, 2]",
    "null": "null",
    "no config": '{"speed": {}}',
    "empty config": '{"config": {}}',
    "config a string": '{"config": "method.k=35"}',
    "config a list": '{"config": [["method.k", 35]]}',
    "nested deep": '{"config": {"method.k": ' + "[" * 5000 + "]" * 5000 + "}}",
    "a setting nested deep": '{"config": {"method.k": [[[[[[1]]]]]]}}',
    "speed_changes not a list": '{"config": {"method.k": 35}, "speed_changes": {"a": 1}}',
    "speed change without its count": '{"config": {"method.k": 35}, "speed_changes": [{"from": {}}]}',
    "data hash not hex": '{"config": {"method.k": 35}, "data": {"data": "abc"}}',
    "NaN": '{"config": {"method.k": NaN}}',
    "binary": "\udcff",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_run_json_is_refused_and_left_as_it_was(tmp_path, case):
    text = BAD[case]
    (tmp_path / "run.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    (tmp_path / "predictions.jsonl").write_text('{"sample_id": "conv-26", "qa_index": 0}\n')
    with pytest.raises(ValueError) as e:
        check_run_dir(tmp_path, CONFIG)
    assert "run.json" in str(e.value) and "\n" not in str(e.value)
    assert (tmp_path / "run.json").read_bytes() == text.encode("utf-8", "surrogateescape")


def test_a_run_json_that_is_a_folder_is_refused(tmp_path):
    (tmp_path / "run.json").mkdir()
    with pytest.raises(ValueError, match="run.json"):
        check_run_dir(tmp_path, CONFIG)


def test_a_good_run_json_resumes_and_keeps_its_shape(tmp_path):
    check_run_dir(tmp_path, CONFIG)
    check_run_dir(tmp_path, CONFIG)
    record = json.loads((tmp_path / "run.json").read_text())
    assert set(record) == {"config", "speed", "speed_changes", "data"} and record["config"]["method.k"] == 35


@pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")
def test_scgmem_run_refuses_an_empty_run_json_and_keeps_the_predictions(tmp_path):
    run_dir = tmp_path / "run"
    assert scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}").returncode == 0
    predictions = (run_dir / "predictions.jsonl").read_bytes()
    (run_dir / "run.json").write_text("")
    line = one_line_error(scgmem_run(*FAST, "method=last_turns", f"hydra.run.dir={run_dir}"))
    assert "run.json" in line
    assert (run_dir / "run.json").read_text() == "" and (run_dir / "predictions.jsonl").read_bytes() == predictions
