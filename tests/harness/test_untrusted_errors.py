"""Issue 42, errors that were tracebacks: each is one line on stderr and exit code 2, before any
model loads where it can be, and a full disk leaves no partial line and no temporary file."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.harness.untrusted_support import DATA, FAST, lines, one_line_error, scgmem_run

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")


@pytest.mark.parametrize("seed", ["abc", "-1"])
def test_a_bad_seed_fails_before_the_model_loads_and_writes_no_run_json(tmp_path, seed):
    run_dir = tmp_path / "run"
    # the real runner: the model would load (and fail slowly) if the seed were checked after it
    proc = scgmem_run(*FAST, "method=full_context", f"seed={seed}", f"hydra.run.dir={run_dir}", scripted=False)
    assert "seed" in one_line_error(proc)
    assert not (run_dir / "run.json").exists()


@pytest.mark.parametrize("override", ["run.progres=false", "method.kk=3", "protocol.max_new_token=9"])
def test_a_misspelled_override_is_one_line(tmp_path, override):
    line = one_line_error(scgmem_run(override, f"hydra.run.dir={tmp_path / 'run'}", scripted=False))
    assert override.split("=")[0] in line and "no such setting" in line
    assert not (tmp_path / "run").exists()


def test_a_sweep_with_a_misspelled_key_is_one_line(tmp_path):
    line = one_line_error(scgmem_run("-m", "method=last_turns", "method.k=5,10", "method.kk=1",
                                     f"hydra.sweep.dir={tmp_path / 'sweep'}", scripted=False))
    assert "method.kk" in line


def test_a_cache_lock_that_is_a_symlink_is_one_line_and_its_target_kept(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    cache = tmp_path / "cache"
    args = [*FAST, "method=memorybank", f"run.cache_dir={cache}"]
    assert scgmem_run(*args, f"hydra.run.dir={tmp_path / 'first'}").returncode == 0
    [entry] = (cache / "memory").rglob("conv-26.json")
    lock = Path(f"{entry}.lock")
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    line = one_line_error(scgmem_run(*args, f"hydra.run.dir={tmp_path / 'second'}"))
    assert ".lock" in line and "symlink" in line
    assert victim.read_text() == "keep me\n"


def temp_files(*folders: Path) -> list[Path]:
    return [p for folder in folders if folder.exists() for p in folder.rglob("*") if ".tmp" in p.name]


@pytest.mark.parametrize("fail_at", [1, 3, 4])
def test_a_full_disk_is_one_line_and_leaves_no_partial_line_or_temp_file(tmp_path, fail_at):
    """The fail_at-th fsync after the model loads fails with ENOSPC: on this run, 1 is the cache
    entry (write_json_atomic), 3 the first predictions chunk, 4 its usage.jsonl line."""
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    args = [*FAST, "method=memorybank", f"run.cache_dir={cache}", f"hydra.run.dir={run_dir}"]
    proc = scgmem_run(*args, env={"SCGMEM_TEST_FAIL_FSYNC": str(fail_at)})
    line = one_line_error(proc)
    assert "No space left on device" in line and str(tmp_path) in line  # names the file
    assert temp_files(run_dir, cache) == []
    for name in ("predictions.jsonl", "usage.jsonl"):
        if (run_dir / name).exists():
            text = (run_dir / name).read_text()
            assert text == "" or text.endswith("\n")  # whole lines only
            [json.loads(line) for line in text.splitlines()]
    # and the same command, with space again, finishes the run
    assert scgmem_run(*args).returncode == 0
    assert len(lines(run_dir / "predictions.jsonl")) == len({(r["sample_id"], r["qa_index"])
                                                              for r in lines(run_dir / "predictions.jsonl")})


def test_write_json_atomic_removes_its_temp_file_when_the_disk_fills(tmp_path, monkeypatch):
    from scgmem.harness import safe_files

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safe_files.os, "fsync", full)
    (tmp_path / "summary.json").write_text('{"kept": true}')
    with pytest.raises(OSError) as e:
        safe_files.write_json_atomic(tmp_path / "summary.json", {"new": 1})
    assert safe_files.disk_error(e.value) is not None and "\n" not in safe_files.disk_error(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    assert json.loads((tmp_path / "summary.json").read_text()) == {"kept": True}


def test_an_append_that_fails_is_cut_back(tmp_path, monkeypatch):
    from scgmem.harness import records

    path = tmp_path / "predictions.jsonl"
    writer = records.PredictionWriter(path)
    writer.write([{"sample_id": "a", "qa_index": 0}])

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(records.os, "fsync", full)
    with pytest.raises(OSError):
        writer.write([{"sample_id": "a", "qa_index": 1}, {"sample_id": "a", "qa_index": 2}])
    writer.close()
    assert path.read_text() == '{"sample_id": "a", "qa_index": 0}\n'
