"""Issue 42, symlinks: a link planted in a run directory or below the cache root is refused in one
line, and nothing is written where it points (scgmem/harness/safe_files.py, run_log.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness.untrusted_support import DATA, FAST, one_line_error, pipeline, scgmem_run, small_slice

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="data/locomo10.json missing: run `make data`")


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_text("keep me\n")
    return folder


def untouched(outside: Path) -> bool:
    return sorted(p.name for p in outside.iterdir()) == ["victim.txt"] and \
        (outside / "victim.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("name", ["predictions.jsonl", "usage.jsonl", "run.log", "memory", ".hydra", "run.json"])
def test_scgmem_run_refuses_a_planted_link_and_writes_nothing_through_it(tmp_path, outside, name):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    target = outside if name in ("memory", ".hydra") else outside / "victim.txt"
    (run_dir / name).symlink_to(target)
    line = one_line_error(scgmem_run(*FAST, "method=full_context", f"hydra.run.dir={run_dir}"))
    assert name in line and "symlink" in line
    assert untouched(outside)
    assert (run_dir / name).is_symlink()  # the user's link is left for them to see


def test_the_pipeline_never_writes_through_a_linked_memory_folder(tmp_path, outside):
    """Second defence, for a link planted after the runner's scan: the export write checks again."""
    from scgmem.harness.safe_files import UnsafeLink

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "memory").symlink_to(outside)
    with pytest.raises(UnsafeLink, match="memory"):
        pipeline("memorybank", run_dir).run(small_slice())
    assert untouched(outside)


def test_appends_never_follow_a_link(tmp_path, outside):
    from scgmem.harness.records import PredictionWriter, UsageLog
    from scgmem.harness.safe_files import UnsafeLink

    (tmp_path / "predictions.jsonl").symlink_to(outside / "victim.txt")
    with pytest.raises(UnsafeLink):
        PredictionWriter(tmp_path / "predictions.jsonl")
    (tmp_path / "usage.jsonl").symlink_to(outside / "victim.txt")
    with pytest.raises(UnsafeLink):
        UsageLog(tmp_path / "usage.jsonl", records=0)
    assert untouched(outside)


@pytest.mark.parametrize("linked", ["memory", "memory/memorybank"])
def test_a_link_below_the_cache_root_is_refused(tmp_path, outside, linked):
    """Either check refuses it in one line: safe_files' (any component below the cache root) or
    path_under's (below the memory folder, resolved)."""
    cache = tmp_path / "cache"
    (cache / linked).parent.mkdir(parents=True, exist_ok=True)
    (cache / linked).symlink_to(outside)
    with pytest.raises(ValueError, match="symlink|outside"):
        pipeline("memorybank", tmp_path / "run", cache_dir=cache).run(small_slice())
    assert untouched(outside)


def test_the_cache_root_itself_may_be_a_link(tmp_path, outside):
    (tmp_path / "cache").symlink_to(outside)
    pipeline("memorybank", tmp_path / "run", cache_dir=tmp_path / "cache").run(small_slice())
    assert list((outside / "memory" / "memorybank").glob("*/conv-26.json"))


def test_links_inside_the_run_directory_that_stay_inside_are_allowed(tmp_path):
    """wandb writes `wandb/latest-run` -> a folder beside it: a resume must not refuse that."""
    from scgmem.harness.safe_files import check_run_dir_links

    (tmp_path / "wandb" / "run-1").mkdir(parents=True)
    (tmp_path / "wandb" / "latest-run").symlink_to(tmp_path / "wandb" / "run-1")
    check_run_dir_links(tmp_path)
    (tmp_path / "wandb" / "escape").symlink_to("/etc")
    with pytest.raises(ValueError, match="outside the run directory"):
        check_run_dir_links(tmp_path)


def test_a_link_planted_after_the_scan_fails_instead_of_being_followed(tmp_path, outside):
    from scgmem.harness.safe_files import UnsafeLink, open_nofollow, write_json_atomic

    os.symlink(outside / "victim.txt", tmp_path / "summary.json")
    with pytest.raises(UnsafeLink):
        write_json_atomic(tmp_path / "summary.json", {"a": 1})
    with pytest.raises(UnsafeLink):
        open_nofollow(tmp_path / "summary.json", "a")
    assert untouched(outside)
