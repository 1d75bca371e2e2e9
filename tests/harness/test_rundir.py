"""A run directory resumes only under its own configuration (scgmem/harness/rundir.py)."""
import pytest
from omegaconf import OmegaConf

from scgmem.harness.rundir import MOVED, RunDirMismatch, check_run_dir


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


def test_a_run_json_from_before_added_settings_and_moved_classes_resumes(tmp_path):
    """run.json of a run started before model.attn_implementation (and the other added keys)
    existed, naming the embedder's old module: today's config with the values that reproduce the
    older code resumes it; a value that computes differently is still refused."""
    import json

    from omegaconf import OmegaConf

    from scgmem.harness.rundir import RunDirMismatch, check_run_dir

    old = {"model.name": "m", "model.dtype": "float32", "embedder._target_": "scgmem.embedder.Embedder", "seed": 0}
    (tmp_path / "run.json").write_text(json.dumps({"config": old}))
    (tmp_path / "predictions.jsonl").write_text("{}\n")
    today = {"model": {"name": "m", "dtype": "float32", "attn_implementation": "sdpa", "static_cache": False,
                       "compile": False, "score_dtype": "float32"},
             "embedder": {"_target_": "scgmem.llm.embedder.Embedder"}, "seed": 0,
             "run": {"jobs_per_gpu": 1, "pin_gpus": False}}
    check_run_dir(tmp_path, OmegaConf.create(today))  # resumes
    (tmp_path / "run.json").write_text(json.dumps({"config": old}))
    changed = {**today, "model": {**today["model"], "attn_implementation": "gqa_sdpa"}}
    with pytest.raises(RunDirMismatch, match="model.attn_implementation: 'sdpa' -> 'gqa_sdpa'"):
        check_run_dir(tmp_path, OmegaConf.create(changed))
    bf16 = {"model.name": "m", "model.dtype": "bfloat16", "embedder._target_": "scgmem.embedder.Embedder", "seed": 0}
    (tmp_path / "run.json").write_text(json.dumps({"config": bf16}))
    with pytest.raises(RunDirMismatch, match="model.score_dtype: 'model' -> 'float32'"):
        check_run_dir(tmp_path, OmegaConf.create({**today, "model": {**today["model"], "dtype": "bfloat16"}}))


def test_every_moved_target_names_a_class_of_today():
    from hydra.utils import get_class

    assert all(isinstance(get_class(new), type) for new in MOVED.values())


@pytest.mark.parametrize("method", ["memorybank", "rag", "rag_locomo", "readagent", "amem", "memgpt",
                                    "full_context", "last_turns"])
def test_a_run_json_naming_the_top_level_baselines_package_resumes(method, tmp_path):
    """Runs made before the baselines moved into scgmem.baselines (issue 27) name
    `baselines.<module>.<Class>` in run.json: today's config of the same method resumes them."""
    import json

    from omegaconf import OmegaConf

    from scgmem.testing.scripted import CONFIG_DIR

    target = OmegaConf.load(CONFIG_DIR / "method" / f"{method}.yaml")["_target_"]
    old = {new: before for before, new in MOVED.items()}[target]
    assert old.startswith("baselines.")
    (tmp_path / "run.json").write_text(json.dumps({"config": {"method._target_": old, "seed": 0}}))
    check_run_dir(tmp_path, OmegaConf.create({"method": {"_target_": target}, "seed": 0}))


def test_the_committed_runs_started_before_the_move_resume(tmp_path):
    """The conv-26 run directories in results/ (started with `baselines.*` targets, some unfinished)
    resume under today's configs composed from their own overrides."""
    import shutil
    from pathlib import Path

    import yaml
    from hydra import compose, initialize_config_dir

    from scgmem.testing.scripted import CONFIG_DIR

    runs = sorted(p.parent for p in (CONFIG_DIR.parent / "results/embedded/conv26_full/runs").glob("*/*/run.json"))
    assert any("baselines." in (r / "run.json").read_text() for r in runs)
    for run in runs:
        overrides = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
        with initialize_config_dir(str(CONFIG_DIR), version_base=None):
            cfg = compose("config", overrides=overrides)
        copy = tmp_path / run.name
        copy.mkdir()
        shutil.copy(run / "run.json", copy)
        check_run_dir(Path(copy), cfg)


def test_a_run_made_while_the_model_configs_held_the_caps_resumes(tmp_path):
    """run.json of `model=qwen2.5-1.5b method=amem` written at f9a0918, when the model config held the
    caps (model.caps.*, now stated per profile by the method and protocol configs): today's config of
    the same choices resumes it; a cap that resolves differently is still refused."""
    import shutil

    from hydra import compose, initialize_config_dir

    from scgmem.testing.scripted import CONFIG_DIR

    fixture = CONFIG_DIR.parent / "tests" / "fixtures" / "run_json_f9a0918_qwen2.5-1.5b_amem.json"
    assert '"model.caps.amem_update_tokens": 1000' in fixture.read_text()

    def resume(*overrides):
        shutil.copy(fixture, tmp_path / "run.json")
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("config", overrides=["model=qwen2.5-1.5b", "method=amem", *overrides])
        check_run_dir(tmp_path, cfg)

    resume()
    with pytest.raises(RunDirMismatch, match="method.analyze_tokens: 384 -> 96"):
        resume("model.cap_profile=embedded")
    with pytest.raises(RunDirMismatch, match="protocol.max_new_tokens: 128 -> 64"):
        resume("protocol.max_new_tokens=64")
