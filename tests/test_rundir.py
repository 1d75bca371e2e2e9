"""A run directory resumes only under its own configuration (scgmem/harness/rundir.py)."""
import pytest
from omegaconf import OmegaConf

from scgmem.harness.rundir import RunDirMismatch, check_run_dir


def config(cache_dir="/home/u/.cache/scgmem", k=35):
    return OmegaConf.create({"run": {"cache_dir": cache_dir, "progress": True},
                             "model": {"name": "smollm2-135m", "cache_dir": "${run.cache_dir}/models"},
                             "method": {"k": k}})


def test_a_resume_may_move_the_caches(tmp_path):
    check_run_dir(tmp_path, config())
    check_run_dir(tmp_path, config(cache_dir="/elsewhere"))  # run.cache_dir and the derived model.cache_dir


def test_a_setting_that_changes_numbers_is_refused(tmp_path):
    check_run_dir(tmp_path, config())
    with pytest.raises(RunDirMismatch, match="method.k: 35 -> 5"):
        check_run_dir(tmp_path, config(k=5))


def test_a_run_json_from_before_a_setting_was_ignored_still_resumes(tmp_path):
    # run.json files written by older code hold model.cache_dir; it must not count as a difference.
    (tmp_path / "run.json").write_text('{"config": {"model.name": "smollm2-135m", '
                                       '"model.cache_dir": "/root/.cache/scgmem/models", "method.k": 35}}')
    check_run_dir(tmp_path, config(cache_dir="/elsewhere"))
