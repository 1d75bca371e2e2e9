"""Where a job's model goes when several jobs run at once (`+launcher=gpu_shared`, docs/reproduce.md).

Table 1 is 24 independent runs, and one run keeps an H200 busy about a quarter of the time
(decode steps are host-bound), so several jobs share a GPU. Two settings in `run`:

- `run.jobs_per_gpu: N` scales each model's memory settings (`model.max_batch_tokens`, the KV
  states of one batch, and `model.prefix_cache_max_tokens`, the kept prefixes) by HEADROOM / N, and
  caps the process at HEADROOM / N of the GPU's memory (`torch.cuda.set_per_process_memory_fraction`),
  so N jobs fit and a job that still overruns gets a CUDA OOM, which splits its batch
  (`scgmem.llm.local.oom`), instead of starving its neighbours. The model configs' sizes are for one job
  alone on one H200. HEADROOM = 0.9 (issue 40, item 5): the cap covers the allocator only, and each
  of the N processes also holds a CUDA context (0.5-1 GB, cuBLAS workspaces and loaded kernels
  included) outside it; at 1/N each the contexts had no room and their OOMs crashed the jobs.
- `run.pin_gpus: true` gives each job process a GPU: it claims a (GPU, slot) pair, N slots per GPU,
  with an exclusive file lock (`claim_slot`), held until the process exits. joblib's loky workers
  each run several jobs and live on, so a job number says nothing about which jobs run at once
  (`job_num mod GPUs` piled the running jobs onto some GPUs); a claim counts the processes that
  really hold a GPU. Slots are tried slot-major (every GPU's slot 0 first), so GPUs fill evenly; with
  every slot held (more processes than N x GPUs) a job falls back to GPU job_num mod GPUs. With
  `device: auto` accelerate would spread every model over all visible GPUs, so each job would use
  each GPU; pinning passes an explicit `cuda:<i>` rather than setting CUDA_VISIBLE_DEVICES, because
  a worker process runs several jobs and CUDA reads that variable once per process.

Nothing here applies without a GPU: on a CPU machine a job runs as configured.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

# Model settings that size GPU memory per job (see configs/model/*.yaml for the arithmetic).
MEMORY_SETTINGS = ("max_batch_tokens", "prefix_cache_max_tokens")
GPU_DEVICES = ("auto", "cuda")  # devices a pinned job replaces; "cpu" and an explicit "cuda:N" stay
HEADROOM = 0.9  # share of a GPU the N jobs' allocators take together; the rest holds their CUDA contexts
SLOTS_ENV = "SCGMEM_GPU_SLOTS"  # folder of the slot lock files (default: <tmp>/scgmem-gpu-slots-<uid>)
_CLAIMED: dict = {}  # this process's claim: {"key": (n_gpus, jobs_per_gpu), "slot": (gpu, slot), "file": fd}


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


def memory_share(jobs_per_gpu: int) -> float:
    """The share of one GPU's memory each of `jobs_per_gpu` jobs may allocate (HEADROOM / N)."""
    return round(HEADROOM / jobs_per_gpu, 4)


def scaled_memory(model: dict, jobs_per_gpu: int) -> dict:
    """A copy of the model settings for one of `jobs_per_gpu` jobs on one GPU (scaled by HEADROOM / N)."""
    out = dict(model)
    for key in MEMORY_SETTINGS:
        if isinstance(out.get(key), int):
            out[key] = max(1, int(out[key] * HEADROOM) // jobs_per_gpu)
    return out


def slots_folder() -> Path:
    return Path(os.environ.get(SLOTS_ENV) or Path(tempfile.gettempdir()) / f"scgmem-gpu-slots-{os.getuid()}")


def claim_slot(n_gpus: int, jobs_per_gpu: int) -> tuple[int, int] | None:
    """A (GPU, slot) this process holds until it exits (an exclusive, non-blocking `flock` on one
    lock file per pair), the same on every later call; None when every slot is held by another
    process (or file locks are unavailable)."""
    key = (n_gpus, jobs_per_gpu)
    if _CLAIMED.get("key") == key:
        return _CLAIMED["slot"]
    try:
        import fcntl
    except ImportError:  # not POSIX: no claims, job numbers decide
        return None
    if "file" in _CLAIMED:  # another sharing layout in this process: give the old claim back
        os.close(_CLAIMED.pop("file"))
    folder = slots_folder()
    folder.mkdir(parents=True, exist_ok=True)
    for slot in range(jobs_per_gpu):  # slot-major: every GPU's first slot before any second one
        for gpu in range(n_gpus):
            fd = os.open(folder / f"gpu{gpu}-slot{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            _CLAIMED.update(key=key, slot=(gpu, slot), file=fd)
            return gpu, slot
    return None


def check_sharing(jobs_per_gpu, pin_gpus) -> None:
    if isinstance(jobs_per_gpu, bool) or not isinstance(jobs_per_gpu, int) or jobs_per_gpu < 1:
        raise ValueError(f"run.jobs_per_gpu must be an integer >= 1, got {jobs_per_gpu!r}")
    if not isinstance(pin_gpus, bool):
        raise ValueError(f"run.pin_gpus must be true or false, got {pin_gpus!r}")


def place_job(model: dict, embedder: dict, *, job_num: int, jobs_per_gpu: int = 1, pin_gpus: bool = False,
              n_gpus: int = 0, claim: Callable[[int, int], tuple[int, int] | None] = claim_slot
              ) -> tuple[dict, dict, dict]:
    """The model and embedder settings (resolved config dicts) one job loads with, and a report of
    the placement for summary.json. `n_gpus` is what the machine shows (`visible_gpus`); a pinned
    job on GPUs asks `claim` (default `claim_slot`) for its (GPU, slot), else GPU job_num mod GPUs."""
    check_sharing(jobs_per_gpu, pin_gpus)
    model, embedder = dict(model), dict(embedder)
    slot = None
    if pin_gpus:
        pins = n_gpus > 0 and any(str(d.get("device", "cpu")) in GPU_DEVICES for d in (model, embedder))
        slot = claim(n_gpus, jobs_per_gpu) if pins else None
        if pins and slot is None:
            log.warning("no free GPU slot of %d x %d (more job processes than slots?): job %d takes GPU %d",
                        n_gpus, jobs_per_gpu, job_num, job_gpu(job_num, n_gpus))
        number = job_num if slot is None else slot[0]  # pinned_device takes GPU number mod n_gpus
        model["device"] = pinned_device(str(model.get("device", "cpu")), number, n_gpus)
        embedder["device"] = pinned_device(str(embedder.get("device", "cpu")), number, n_gpus)
    on_gpu = n_gpus > 0 and str(model.get("device", "cpu")) != "cpu"
    if on_gpu and jobs_per_gpu > 1:
        model = scaled_memory(model, jobs_per_gpu)
    device = str(model.get("device", "cpu"))
    report = {"job_num": job_num, "jobs_per_gpu": jobs_per_gpu, "pin_gpus": pin_gpus, "visible_gpus": n_gpus,
              "device": device, "gpu": int(device.split(":")[1]) if device.startswith("cuda:") else None,
              "slot": None if slot is None else slot[1],
              "memory_fraction": memory_share(jobs_per_gpu) if on_gpu and jobs_per_gpu > 1 else None,
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
