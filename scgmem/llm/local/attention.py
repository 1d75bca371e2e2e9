"""Which fused attention kernels a CUDA forward may use (`model.sdpa_backends`).

PyTorch may route `scaled_dot_product_attention` to cuDNN's kernel on Hopper GPUs. cuDNN builds an
execution plan for every new input shape, and generation changes the shape (the KV length) at
every step, so every step of a call over lengths not seen before pays a plan build. Measured on
an H200 with a random-weight Llama-3.2-1B shape (transformers 5.17, torch 2.11;
results/device/20261204/throughput*.json, scripts/device_throughput.py): 64 greedy tokens after a
512-token prompt took 55 ms per step the first time and 12.8 ms per step when the same call was
repeated over the same lengths, where the profile showed `_scaled_dot_product_cudnn_attention`
on every layer. Real runs see new lengths all the time, so the harness keeps attention on the
flash / memory-efficient / math kernels, which need no per-shape plan. Outputs are the same
computation; kernels differ only in float rounding.

On a CPU nothing changes: the restriction applies only to forwards on a CUDA device.
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch

BACKENDS = ("flash", "efficient", "cudnn", "math")


def check_backends(names: Sequence[str] | None) -> tuple[str, ...] | None:
    """`model.sdpa_backends` validated: None (torch's own choice) or a non-empty subset of BACKENDS."""
    if names is None:
        return None
    names = tuple(str(n) for n in names)
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise ValueError(f"model.sdpa_backends={list(names)!r}: each must be one of {list(BACKENDS)}, at least one")
    return names


def attention_kernels(device: torch.device, names: tuple[str, ...] | None):
    """A context in which SDPA uses only `names` (on CUDA; a no-op elsewhere or for None)."""
    if names is None or torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([chosen[n] for n in names])
