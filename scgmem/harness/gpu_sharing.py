"""Where a job's model goes when several jobs run at once (`+launcher=gpu_shared`, docs/reproduce.md).

Table 1 is 24 independent runs, and one run keeps an H200 busy about a quarter of the time
(decode steps are host-bound), so several jobs share a GPU. Two settings in `run`:

- `run.jobs_per_gpu: N` divides each model's memory settings (`model.max_batch_tokens`, the KV
  states of one batch, and `model.prefix_cache_max_tokens`, the kept prefixes) by N, and caps the
  process at 1/N of the GPU's memory (`torch.cuda.set_per_process_memory_fraction`), so N jobs fit
  and a job that still overruns gets a CUDA OOM, which splits its batch (`scgmem.llm.oom`), instead
  of starving its neighbours. The model configs' sizes are for one job alone on one H200.
- `run.pin_gpus: true` puts job n (Hydra's `hydra.job.num`) on GPU n mod (visible GPUs): with
  `device: auto` accelerate would spread every model over all visible GPUs, so each job would use
  each GPU. Pinning passes an explicit `cuda:<i>` rather than setting CUDA_VISIBLE_DEVICES, because
  a joblib worker process runs several jobs and CUDA reads that variable once per process.

Nothing here applies without a GPU: on a CPU machine a job runs as configured.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# Model settings that size GPU memory per job (see configs/model/*.yaml for the arithmetic).
MEMORY_SETTINGS = ("max_batch_tokens", "prefix_cache_max_tokens")
GPU_DEVICES = ("auto", "cuda")  # devices a pinned job replaces; "cpu" and an explicit "cuda:N" stay


def job_gpu(job_num: int, n_gpus: int) -> int:
    """The GPU index of job `job_num` (Hydra's job number, 0-based) on a machine with `n_gpus`."""
    if n_gpus < 1:
        raise ValueError(f"job_gpu needs at least one GPU, got n_gpus={n_gpus}")
    if job_num < 0:
        raise ValueError(f"hydra.job.num must be >= 0, got {job_num}")
    return job_num % n_gpus


def pinned_device(device: str, job_num: int, n_gpus: int) -> str:
    """The device a job loads its model on: `auto`/`cuda` become `cuda:<job_gpu>` when there are
    GPUs; `cpu` and an explicit `cuda:N` are kept (the config chose them)."""
    if n_gpus < 1 or device not in GPU_DEVICES:
        return device
    return f"cuda:{job_gpu(job_num, n_gpus)}"


def scaled_memory(model: dict, jobs_per_gpu: int) -> dict:
    """A copy of the model settings for one of `jobs_per_gpu` jobs on one GPU."""
    out = dict(model)
    for key in MEMORY_SETTINGS:
        if isinstance(out.get(key), int):
            out[key] = max(1, out[key] // jobs_per_gpu)
    return out


def check_sharing(jobs_per_gpu, pin_gpus) -> None:
    if isinstance(jobs_per_gpu, bool) or not isinstance(jobs_per_gpu, int) or jobs_per_gpu < 1:
        raise ValueError(f"run.jobs_per_gpu must be an integer >= 1, got {jobs_per_gpu!r}")
    if not isinstance(pin_gpus, bool):
        raise ValueError(f"run.pin_gpus must be true or false, got {pin_gpus!r}")


def place_job(model: dict, embedder: dict, *, job_num: int, jobs_per_gpu: int = 1, pin_gpus: bool = False,
              n_gpus: int = 0) -> tuple[dict, dict, dict]:
    """The model and embedder settings (resolved config dicts) one job loads with, and a report of
    the placement for summary.json. Pure: `n_gpus` is what the machine shows (`visible_gpus`)."""
    check_sharing(jobs_per_gpu, pin_gpus)
    model, embedder = dict(model), dict(embedder)
    if pin_gpus:
        model["device"] = pinned_device(str(model.get("device", "cpu")), job_num, n_gpus)
        embedder["device"] = pinned_device(str(embedder.get("device", "cpu")), job_num, n_gpus)
    on_gpu = n_gpus > 0 and str(model.get("device", "cpu")) != "cpu"
    if on_gpu and jobs_per_gpu > 1:
        model = scaled_memory(model, jobs_per_gpu)
    device = str(model.get("device", "cpu"))
    report = {"job_num": job_num, "jobs_per_gpu": jobs_per_gpu, "pin_gpus": pin_gpus, "visible_gpus": n_gpus,
              "device": device, "gpu": int(device.split(":")[1]) if device.startswith("cuda:") else None,
              "memory_fraction": round(1.0 / jobs_per_gpu, 4) if on_gpu and jobs_per_gpu > 1 else None,
              **{key: model.get(key) for key in MEMORY_SETTINGS}}
    return model, embedder, report


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def claim_gpu(report: dict) -> None:
    """Make the job's GPU the process's current one and cap its share of that GPU's memory
    (before the model loads: allocations made without an index go to the current GPU)."""
    import torch

    if report["gpu"] is None and report["memory_fraction"] is None:
        return
    gpu = report["gpu"] if report["gpu"] is not None else torch.cuda.current_device()
    torch.cuda.set_device(gpu)
    if report["memory_fraction"] is not None:
        torch.cuda.set_per_process_memory_fraction(report["memory_fraction"], device=gpu)
    log.info("job %d on cuda:%d (%s of its memory)", report["job_num"], gpu, report["memory_fraction"] or "all")
