"""Issue 32: one report from several sweeps; two runs for one cell are an error naming both."""
from __future__ import annotations

from dataclasses import replace

import pytest

from scgmem.report import cli
from scgmem.report.collect import RunConflict, collect_all, for_experiment, index_runs
from tests.report import rec, write_run

RECORDS = [rec("conv-1", i, c, 0.5) for i, c in enumerate((1, 1, 2, 2, 4, 4, 5, 5))]


def test_two_sweeps_combine_and_other_experiments_stay_out(tmp_path):
    a = write_run(tmp_path / "A" / "m" / "amem" / "x", model="m", method="amem", records=RECORDS,
                  overrides=["+experiment=table1"])
    write_run(tmp_path / "B" / "m" / "scgmem" / "x", model="m", method="scgmem", records=RECORDS,
              overrides=["+experiment=table1"])
    write_run(tmp_path / "B" / "m" / "scgmem" / "k5", model="m", method="scgmem", records=RECORDS,
              method_cfg={"k": 5}, overrides=["+experiment=fig3", "method.k=5"])
    runs = for_experiment(collect_all([tmp_path / "A", tmp_path / "B"]), "table1")
    assert sorted(r.method for r in runs) == ["amem", "scgmem"]  # the fig3 point is left out
    twin = replace(runs[0], run_dir=tmp_path / "C")  # the same cell in a third folder
    with pytest.raises(RunConflict, match="two runs for"):
        index_runs([*runs, twin], lambda r: (r.model, r.method))
    assert a.exists()

def test_cli_conflict_exits_2_naming_both_folders(tmp_path, capsys):
    for sweep in ("A", "B"):
        write_run(tmp_path / sweep / "m" / "amem" / "x", model="m", method="amem", records=RECORDS,
                  questions_per_category=2 if sweep == "A" else 3, overrides=["+experiment=table1"])
    assert cli.main(["table1", "--runs", str(tmp_path / "A"), "--runs", str(tmp_path / "B"),
                     "--out", str(tmp_path / "out"), "--n-resamples", "20"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "A") in err and str(tmp_path / "B") in err
