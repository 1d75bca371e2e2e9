"""Experiment and launcher configs: the jobs a `-m` command line expands to, composed with Hydra.

The job lists come from Hydra's own BasicSweeper logic (`hydra.sweeper.params` of the
composed config first, then the command line, keyed by override name, product of the
sweeps), so these tests see what `scgmem-run -m ...` would launch, without running a model.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import get_class

from scgmem.harness.cli_checks import check_overrides

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
PAPER_MODELS = ["qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b"]
TABLE1_METHODS = ["full_context", "readagent", "memorybank", "memgpt", "amem", "scgmem"]
SLICE = ["data.samples=[conv-26]", "data.questions_per_category=20"]
def sweep_jobs(argv: list[str]) -> list[list[str]]:
    """The override list of every job `scgmem-run -m <argv>` launches (BasicSweeper.sweep's logic)."""
    parser = OverridesParser.create()
    fixed = [o.input_line for o in parser.parse_overrides(argv) if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="config", overrides=fixed, return_hydra_config=True)
    params = [f"{k}={v}" for k, v in (cfg.hydra.sweeper.params or {}).items()]
    return BasicSweeper.split_arguments(parser.parse_overrides(params + argv), None)[0]


def compose_job(job: list[str], hydra: bool = False):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="config", overrides=job, return_hydra_config=hydra)


def _value(job: list[str], key: str) -> str:
    return next(o.split("=", 1)[1] for o in job if o.split("=", 1)[0] == key)


def test_table1_on_the_embedded_model_is_six_jobs():
    jobs = sweep_jobs(["+experiment=table1", "model=smollm2-135m", *SLICE])
    assert len(jobs) == 6
    assert sorted(_value(j, "method") for j in jobs) == sorted(TABLE1_METHODS)
    for job in jobs:
        cfg = compose_job(job)
        assert cfg.model.name == "smollm2-135m"
        assert cfg.method._target_
        assert cfg.protocol._target_ == "scgmem.scoring.protocols.AmemProtocol"  # the paper's protocol
        assert list(cfg.data.samples) == ["conv-26"] and cfg.data.questions_per_category == 20


def test_table1_defaults_to_the_paper_grid_and_cli_lists_replace_it():
    jobs = sweep_jobs(["+experiment=table1"])
    assert len(jobs) == 24
    assert sorted({_value(j, "model") for j in jobs}) == sorted(PAPER_MODELS)
    assert len(sweep_jobs(["+experiment=table1", "model=smollm2-135m,qwen2.5-3b"])) == 12
    pinned = sweep_jobs(["+experiment=table1", "method=amem"])
    assert len(pinned) == 4 and {_value(j, "method") for j in pinned} == {"amem"}


def test_table2_is_scgmem_and_its_ablations_on_qwen():
    jobs = sweep_jobs(["+experiment=table2"])
    combos = set()
    for job in jobs:
        cfg = compose_job(job)
        assert cfg.model.name == "qwen2.5-3b"
        combos.add((cfg.method.constraint, cfg.method.evolution))
    # full, w/o constraint, w/o evolution (the paper's rows), and both removed (the product's 4th cell)
    assert combos == {(True, True), (False, True), (True, False), (False, False)}
    cfg = compose_job(sweep_jobs(["+experiment=table2", "model=smollm2-135m"])[0])
    assert cfg.model.name == "smollm2-135m"  # the command line replaces the experiment's model


@pytest.mark.parametrize("experiment, key, values", [
    ("fig3", "k", [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]),
    ("fig4", "hops", [0, 1, 2]),
])
def test_figure_sweeps(experiment, key, values):
    jobs = sweep_jobs([f"+experiment={experiment}", "model=smollm2-135m", *SLICE])
    assert len(jobs) == len(values)
    seen = []
    for job in jobs:
        cfg = compose_job(job)
        assert cfg.model.name == "smollm2-135m"
        seen.append(cfg.method[key])
    assert sorted(seen) == values
    default = compose_job(sweep_jobs([f"+experiment={experiment}"])[0])
    assert default.model.name == "qwen2.5-3b"


@pytest.mark.parametrize("launcher, target, key, value", [
    ("joblib", "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs", 2),
    ("submitit_slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", "gpus_per_node", 1),
])
def test_launchers_compose(launcher, target, key, value):
    job = sweep_jobs(["+experiment=table1", "model=smollm2-135m", f"+launcher={launcher}"])[0]
    cfg = compose_job(job, hydra=True)
    assert cfg.hydra.launcher._target_ == target
    assert cfg.hydra.launcher[key] == value
    assert get_class(target)  # the plugin is installed
    assert cfg.model.name == "smollm2-135m"  # the launcher changes where jobs run, not what they are


def test_cli_checks_accept_the_experiments_and_launchers():
    argv = ["-m", "+experiment=table1", "+launcher=joblib", "model=smollm2-135m,qwen2.5-3b", "logger=wandb"]
    assert check_overrides(argv, CONFIGS) is None
    assert "table9" in check_overrides(["+experiment=table9"], CONFIGS)
    # a misspelt group would add an unread top-level value and run without the experiment
    assert "no config group 'experment'" in check_overrides(["+experment=table1"], CONFIGS)
    assert check_overrides(["++model.cap_profile=paper", "+model.extra=1"], CONFIGS) is None  # values, not groups


def _make_run_args(target: str, *make_args: str) -> list[str]:
    """The scgmem-run arguments `make <target>` would use (make -n prints the commands)."""
    out = subprocess.run(["make", "-n", "-C", str(ROOT), target, *make_args], capture_output=True, text=True,
                         check=True).stdout
    line = next(ln for ln in out.splitlines() if "scgmem-run" in ln)
    args = shlex.split(line)
    # hydra.sweep.dir (the stable, resumable sweep folder) says where, not which jobs
    return [a for a in args[args.index("-m") + 1:] if not a.startswith("hydra.sweep.dir=")]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target, n_jobs", [("reproduce-table1", 6), ("reproduce-table2", 4),
                                            ("reproduce-fig3", 10), ("reproduce-fig4", 3)])
def test_make_targets_and_a_hand_typed_multirun_agree(target, n_jobs):
    args = _make_run_args(target, "MODELS=smollm2-135m", f"SLICE={' '.join(SLICE)}")
    experiment = target.split("-")[1]
    assert args[0] == f"+experiment={experiment}" and "model=smollm2-135m" in args
    assert len(sweep_jobs(args)) == n_jobs
    hand_typed = [f"+experiment={experiment}", "model=smollm2-135m", *SLICE]
    assert sorted(map(sorted, sweep_jobs(hand_typed))) == sorted(map(sorted, sweep_jobs(args)))


def test_every_table1_method_has_its_config():
    missing = [m for m in TABLE1_METHODS if not (CONFIGS / "method" / f"{m}.yaml").is_file()]
    assert not missing, f"configs/method/ lacks {missing}"
