"""CUDA out-of-memory is not fatal: a forward batch that runs out of GPU memory is split in
halves and each half retried, down to one row.

Why: batch sizes are fixed by `model.max_batch_tokens` for the worst case of one job alone on
the GPU, but a long-context batch (a 26K-token LoCoMo transcript, 10 rows) can still meet a
fragmented allocator or a neighbour job (`launcher=gpu_shared`) that holds more memory than
planned. Losing a 3-hour run to that is worse than running one batch in smaller pieces.

Outputs: a row's output does not depend on which rows share its batch up to the float rounding
of batch composition (`scgmem.llm.local.backend`), so a split changes nothing on a float32 model and
at most that rounding on bf16; the splits are counted (`OomSplitter.report`, in summary.json
under `generation.oom`) so a run whose batches were split says so.

What counts as out of memory (issue 40, item 4): the caching allocator raises
`torch.OutOfMemoryError`, but memory runs out elsewhere too, and arrives as a `RuntimeError` (or
`torch.AcceleratorError`): cuBLAS/cuDNN handle and workspace creation
(`CUBLAS_STATUS_ALLOC_FAILED`, `CUDNN_STATUS_ALLOC_FAILED`), CUDA graph instantiation and Triton
kernel loads ("CUDA error: out of memory"). `is_out_of_memory` recognises those by message. Before a
retry, `free_cuda_cache` calls the releases registered by whatever holds memory the allocator's
`empty_cache` cannot return (`register_release`: the static KV caches and CUDA graph pools of
`scgmem.llm.local.static_decode`), then empties the cache.

Example::

    splitter = OomSplitter()
    outs = splitter.run(lambda part: forward([rows[i] for i in part]), list(range(len(rows))))
"""
from __future__ import annotations

import gc
import logging
import re
import weakref
from typing import Callable, Sequence

import torch

log = logging.getLogger(__name__)

# Messages of out-of-memory errors that do not come from the caching allocator.
OOM_MESSAGES = re.compile(r"out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
                          r"CUDA_ERROR_OUT_OF_MEMORY|hipErrorOutOfMemory", re.IGNORECASE)
_RELEASES: list[weakref.WeakMethod] = []


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is the device running out of memory: the allocator's OutOfMemoryError, or a
    RuntimeError / AcceleratorError (a subclass of RuntimeError) whose message says so."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and bool(OOM_MESSAGES.search(str(error)))


def register_release(method) -> None:
    """Have `free_cuda_cache` call `method` (a bound method, held weakly: its object may go away)."""
    _RELEASES.append(weakref.WeakMethod(method))


def free_cuda_cache() -> None:
    """Drop what the registered holders keep (static caches, CUDA graph pools), then return the
    caching allocator's free blocks to the driver (a no-op without CUDA), after the failed
    attempt's tensors are garbage: the traceback of the OOM held them."""
    _RELEASES[:] = [ref for ref in _RELEASES if ref() is not None]
    for ref in list(_RELEASES):
        release = ref()
        if release is not None:
            release()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class OomSplitter:
    """Runs forward batches, halving a batch that runs out of memory (`is_out_of_memory`).

    Attributes (counts, so shards of a run add up):
        splits: batches (or parts of one) that ran out of memory and were split in two.
        rows_split: rows of those batches (a row retried after two splits counts twice).
    """

    def __init__(self, free_cache: Callable[[], None] = free_cuda_cache) -> None:
        self.free_cache = free_cache
        self.splits = 0
        self.rows_split = 0

    def run(self, run_batch: Callable[[list], list], items: Sequence) -> list:
        """`run_batch(items) -> one output per item`, retried on halves after an OOM; returns the
        outputs in the order of `items`. A single item that runs out of memory re-raises."""
        return self._run(run_batch, list(items), depth=0)

    def _run(self, run_batch, items: list, depth: int) -> list:
        try:
            return run_batch(items)
        except RuntimeError as e:  # torch.OutOfMemoryError and AcceleratorError are RuntimeErrors
            if not is_out_of_memory(e):
                raise
            if len(items) <= 1:
                raise torch.OutOfMemoryError(
                    f"one row ran out of GPU memory after {depth} halvings ({e}); lower "
                    "model.max_batch_tokens / model.prefix_cache_max_tokens or run fewer jobs per GPU") from e
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
        # Outside the except block: the exception (and its frames' tensors) is released first.
        self.free_cache()
        half = (len(items) + 1) // 2
        self.splits += 1
        self.rows_split += len(items)
        log.warning("CUDA out of memory on a batch of %d rows (%s): retrying as %d + %d rows",
                    len(items), message, half, len(items) - half)
        return self._run(run_batch, items[:half], depth + 1) + self._run(run_batch, items[half:], depth + 1)

    def report(self) -> dict:
        """For summary.json (`generation.oom`)."""
        return {"splits": self.splits, "rows_split": self.rows_split}
