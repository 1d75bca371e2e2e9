"""Several jobs per GPU: job n pinned to GPU n mod GPUs, memory settings divided among the jobs of
one GPU, and the `gpu_shared` launcher config composes with every GPU model."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from scgmem.harness.gpu_sharing import HEADROOM, job_gpu, pinned_device, place_job, scaled_memory


def no_claim(n_gpus, jobs_per_gpu):  # every slot taken: job numbers decide
    return None

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GPU_MODELS = ("qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b", "local")


def test_job_gpu_cycles_over_the_gpus():
    assert [job_gpu(n, 4) for n in range(10)] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert [job_gpu(n, 1) for n in range(3)] == [0, 0, 0]
    with pytest.raises(ValueError, match="n_gpus=0"):
        job_gpu(0, 0)
    with pytest.raises(ValueError, match="hydra.job.num must be >= 0, got -1"):
        job_gpu(-1, 2)


def test_pinned_device_replaces_only_auto_and_cuda():
    assert pinned_device("auto", 5, 2) == "cuda:1"
    assert pinned_device("cuda", 6, 4) == "cuda:2"
    assert pinned_device("cpu", 5, 2) == "cpu"
    assert pinned_device("cuda:3", 0, 4) == "cuda:3"  # the config chose a GPU
    assert pinned_device("auto", 5, 0) == "auto"  # no GPU: as configured


def test_place_job_scales_memory_on_a_gpu_only():
    model = {"device": "auto", "batch_size": 32, "max_batch_tokens": 262144, "prefix_cache_max_tokens": 131072}
    embedder = {"device": "cpu"}
    placed, emb, report = place_job(model, embedder, job_num=5, jobs_per_gpu=4, pin_gpus=True, n_gpus=2,
                                    claim=no_claim)
    assert placed == {"device": "cuda:1", "batch_size": 32, "max_batch_tokens": 58982,  # 262144 x 0.9 / 4
                      "prefix_cache_max_tokens": 29491}
    assert emb == {"device": "cpu"} and model["device"] == "auto"  # inputs untouched
    assert report["gpu"] == 1 and report["memory_fraction"] == 0.225 and report["job_num"] == 5
    claimed, _, report = place_job(model, embedder, job_num=5, jobs_per_gpu=4, pin_gpus=True, n_gpus=2,
                                   claim=lambda n, k: (0, 3))
    assert claimed["device"] == "cuda:0" and (report["gpu"], report["slot"]) == (0, 3)  # the claim, not job 5
    on_cpu, _, report = place_job(model, embedder, job_num=5, jobs_per_gpu=4, pin_gpus=True, n_gpus=0)
    assert on_cpu == model and report["memory_fraction"] is None and report["gpu"] is None
    alone, _, report = place_job(model, embedder, job_num=3, n_gpus=8)
    assert alone == model and report["memory_fraction"] is None
    assert scaled_memory({"max_batch_tokens": 3}, 4) == {"max_batch_tokens": 1}


@pytest.mark.parametrize("bad,message", [({"jobs_per_gpu": 0}, "run.jobs_per_gpu must be an integer >= 1, got 0"),
                                         ({"jobs_per_gpu": "4"}, "run.jobs_per_gpu"),
                                         ({"pin_gpus": "yes"}, "run.pin_gpus must be true or false, got 'yes'")])
def test_bad_settings_name_the_key(bad, message):
    with pytest.raises(ValueError, match=message):
        place_job({}, {}, job_num=0, **{"jobs_per_gpu": 1, "pin_gpus": False, **bad})


@pytest.mark.parametrize("model", GPU_MODELS)
def test_gpu_shared_launcher_composes_and_four_jobs_share_one_gpu(model):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["+launcher=gpu_shared", f"model={model}", "model.path=/some/folder"][:2 + (model == "local")])
    assert cfg.hydra.launcher.n_jobs == cfg.run.jobs_per_gpu == 4 and cfg.run.pin_gpus is True
    assert "joblib" in cfg.hydra.launcher._target_.lower()
    node = OmegaConf.to_container(cfg.model, resolve=True)
    placed, _, report = place_job(node, OmegaConf.to_container(cfg.embedder, resolve=True), job_num=2,
                                  jobs_per_gpu=cfg.run.jobs_per_gpu, pin_gpus=cfg.run.pin_gpus, n_gpus=1,
                                  claim=no_claim)
    assert placed["device"] == "cuda:0" and report["memory_fraction"] == round(HEADROOM / 4, 4) < 0.25
    assert placed["max_batch_tokens"] * 4 <= node["max_batch_tokens"]
    assert placed["prefix_cache_max_tokens"] * 4 <= node["prefix_cache_max_tokens"]
    assert placed["prefix_cache_min_tokens"] < placed["prefix_cache_max_tokens"]


CLAIMER = """
import sys, time
from scgmem.harness.gpu_sharing import claim_slot
print(*claim_slot(int(sys.argv[1]), int(sys.argv[2])), flush=True)
time.sleep(float(sys.argv[3]))
"""


def test_processes_claim_distinct_slots_and_free_them_on_exit(tmp_path):
    """Four job processes on 2 GPUs x 2 slots each hold a distinct (GPU, slot), GPUs filled evenly;
    a fifth finds none; a slot whose process ended is free again (issue 40, item 5)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "SCGMEM_GPU_SLOTS": str(tmp_path), "PYTHONPATH": str(CONFIGS.parent)}
    spawn = lambda hold: subprocess.Popen([sys.executable, "-c", CLAIMER, "2", "2", str(hold)], env=env,  # noqa: E731
                                          stdout=subprocess.PIPE, text=True)
    holders, claims = [], []
    for _ in range(4):  # one at a time (each has claimed before the next starts): the order is fixed
        holders.append(spawn(60))
        claims.append(tuple(map(int, holders[-1].stdout.readline().split())))
    assert claims == [(0, 0), (1, 0), (0, 1), (1, 1)]
    late = subprocess.run([sys.executable, "-c", CLAIMER.replace("print(*", "print("), "2", "2", "0"], env=env,
                          capture_output=True, text=True, check=True)
    assert late.stdout.strip() == "None"
    holders[1].kill()
    holders[1].wait()
    again = subprocess.run([sys.executable, "-c", CLAIMER, "2", "2", "0"], env=env, capture_output=True, text=True,
                           check=True)
    assert again.stdout.split() == ["1", "0"]
    for p in holders:
        p.kill()
        p.wait()
