"""Issue 42, the data changed under the same path: run.json records a content hash of the data file
(and of the audited-gold file under data.gold=audited), and a resume whose data differ is refused
in one line; a run.json from before the hashes is checked record by record instead, and gets them
(scgmem/harness/rundir.py, stored_records.py)."""
from __future__ import annotations

import json
import shutil

import pytest
from omegaconf import OmegaConf

from scgmem.harness.rundir import check_run_dir, data_hashes
from tests.harness.untrusted_support import DATA, FAST, lines, one_line_error, scgmem_run

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")
CONFIG = OmegaConf.create({"method": {"k": 35}, "seed": 0})


@pytest.fixture
def data_copy(tmp_path):
    path = tmp_path / "locomo10.json"
    shutil.copy(DATA, path)
    return path


def edit_first_answer(path, text="an edited gold answer"):
    data = json.loads(path.read_text())
    qa = next(q for q in data[0]["qa"] if q["category"] == 2)
    qa["answer"] = text
    path.write_text(json.dumps(data))


def source(path, gold="original"):
    from scgmem.data.locomo import LoCoMoSource

    return LoCoMoSource(path=str(path), samples=["conv-26"], gold=gold)


def test_run_json_records_the_data_hash_and_a_changed_file_is_refused(tmp_path, data_copy):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_run_dir(run_dir, CONFIG, data_hashes(source(data_copy)))
    assert len(json.loads((run_dir / "run.json").read_text())["data"]["data"]) == 64
    check_run_dir(run_dir, CONFIG, data_hashes(source(data_copy)))  # same data: resumes
    edit_first_answer(data_copy)
    with pytest.raises(ValueError, match="data.data.*changed since this run started") as e:
        check_run_dir(run_dir, CONFIG, data_hashes(source(data_copy)))
    assert "\n" not in str(e.value)


def test_the_audited_gold_file_is_hashed_too():
    hashes = data_hashes(source(DATA, gold="audited"))
    assert set(hashes) == {"data", "audit"} and hashes["audit"] != hashes["data"]
    assert set(data_hashes(source(DATA))) == {"data"}


def test_a_run_json_from_before_the_hashes_gets_them(tmp_path, data_copy):
    (tmp_path / "run.json").write_text(json.dumps({"config": {"method.k": 35, "seed": 0}}))
    check_run_dir(tmp_path, CONFIG, data_hashes(source(data_copy)))
    assert json.loads((tmp_path / "run.json").read_text())["data"] == data_hashes(source(data_copy))


def test_scgmem_run_over_edited_data_refuses_and_keeps_the_old_records(tmp_path, data_copy):
    run_dir = tmp_path / "run"
    args = [*FAST, "method=full_context", f"data.path={data_copy}", f"hydra.run.dir={run_dir}"]
    assert scgmem_run(*args).returncode == 0
    before = (run_dir / "predictions.jsonl").read_bytes()
    edit_first_answer(data_copy)
    line = one_line_error(scgmem_run(*args))
    assert "run.json" in line and "changed since this run started" in line
    assert (run_dir / "predictions.jsonl").read_bytes() == before


def test_without_a_hash_the_records_still_catch_an_edited_gold(tmp_path, data_copy):
    """A run.json written before the hashes: the stored records are checked against today's data."""
    run_dir = tmp_path / "run"
    args = [*FAST, "method=full_context", f"data.path={data_copy}", f"hydra.run.dir={run_dir}"]
    assert scgmem_run(*args).returncode == 0
    record = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({"config": record["config"]}))  # as older code wrote it
    edit_first_answer(data_copy)
    line = one_line_error(scgmem_run(*args))
    assert "predictions.jsonl" in line and "'reference'" in line
    assert len(lines(run_dir / "predictions.jsonl")) >= 1
