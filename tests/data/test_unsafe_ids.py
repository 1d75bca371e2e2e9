"""Ids from the data file that name files: refused where they enter (exit 2, one line), and no
path built from data leaves its folder (scgmem/api/paths.py)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scgmem.api.paths import UnsafePath, is_safe_name, path_under
from scgmem.data.locomo import DataError, load_locomo
from tests.harness.test_run_e2e import scgmem_run

BAD_IDS = ["../../evil", "/tmp/scgmem-absolute-evil", "conv/26", ""]


def crafted(tmp_path: Path, locomo_path: Path, sample_id: str) -> Path:
    """locomo10.json with its first conversation cut to one session and renamed `sample_id`."""
    samples = json.loads(locomo_path.read_text())[:1]
    conv = samples[0]["conversation"]
    for key in [k for k in conv if k.startswith("session_") and not k.startswith("session_1")]:
        del conv[key]
    samples[0]["sample_id"] = sample_id
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(samples))
    return path


@pytest.mark.parametrize("sample_id", BAD_IDS)
def test_loader_refuses_ids_that_cannot_name_a_file(tmp_path, locomo_path, sample_id):
    with pytest.raises(DataError, match=r"sample\[0\]: field 'sample_id' must be .* got") as e:
        load_locomo(crafted(tmp_path, locomo_path, sample_id))
    assert "\n" not in str(e.value)


def test_duplicate_sample_and_dia_ids_are_refused(tmp_path, locomo_path):
    samples = json.loads(locomo_path.read_text())[:2]
    samples[1]["sample_id"] = samples[0]["sample_id"]
    (tmp_path / "dup.json").write_text(json.dumps(samples))
    with pytest.raises(DataError, match=r"sample\[1\]: field 'sample_id' 'conv-26' appears twice"):
        load_locomo(tmp_path / "dup.json")
    samples = json.loads(locomo_path.read_text())[:1]
    session = samples[0]["conversation"]["session_2"]
    session[1]["dia_id"] = samples[0]["conversation"]["session_1"][0]["dia_id"]
    (tmp_path / "dia.json").write_text(json.dumps(samples))
    with pytest.raises(DataError, match=r"session_2\[1\]: field 'dia_id' 'D1:1' appears twice"):
        load_locomo(tmp_path / "dia.json")


def test_json_too_deep_or_too_long_is_one_line(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(DataError, match="nested too deeply"):
        load_locomo(tmp_path / "deep.json")
    (tmp_path / "long.json").write_text('[{"sample_id": ' + "9" * 5000 + "}]")
    with pytest.raises(DataError, match="not valid JSON"):
        load_locomo(tmp_path / "long.json")


def test_path_under_is_the_second_defence(tmp_path):
    assert path_under(tmp_path, "memory", "conv-26.json") == tmp_path / "memory" / "conv-26.json"
    for name in ("..", ".", "../x.json", "/etc/passwd", "a/b", "", "x" * 129, "nul\x00.json"):
        assert not is_safe_name(name)
        with pytest.raises(UnsafePath):
            path_under(tmp_path, name)
    (tmp_path / "link").symlink_to("/")  # a safe name whose folder leads elsewhere
    with pytest.raises(UnsafePath, match="would lie outside it"):
        path_under(tmp_path, "link", "etc")


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


@pytest.mark.parametrize("method", ["scgmem", "full_context"])
@pytest.mark.parametrize("sample_id", BAD_IDS)
def test_run_with_a_crafted_id_exits_2_and_writes_nothing_outside(tmp_path, locomo_path, method, sample_id):
    data = crafted(tmp_path / "in", locomo_path, sample_id) if (tmp_path / "in").mkdir() is None else None
    work = tmp_path / "work"
    run_dir, cache = work / "run" / "a", work / "cache"
    outside = Path("/tmp/scgmem-absolute-evil.json")
    outside.unlink(missing_ok=True)
    proc = scgmem_run(f"method={method}", f"data.path={data}", "data.max_sessions=1", "data.questions_per_category=1",
                      f"hydra.run.dir={run_dir}", f"run.cache_dir={cache}", "run.progress=false", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "field 'sample_id'" in lines[0] and str(data) in lines[0], lines
    written = _files(work)
    assert all(p.is_relative_to(run_dir) or p.is_relative_to(cache) for p in written), written
    assert not any(p.suffix == ".json" and p.parent.name == "memory" for p in written)  # no memory export
    assert not outside.exists() and not (work / "evil.json").exists() and not (work / "run" / "evil.json").exists()
    assert not os.path.exists(tmp_path / "in" / "evil.json")
