"""CUDA out-of-memory is not fatal: a forward batch that runs out of GPU memory is split in
halves and each half retried, down to one row.

Why: batch sizes are fixed by `model.max_batch_tokens` for the worst case of one job alone on
the GPU, but a long-context batch (a 26K-token LoCoMo transcript, 10 rows) can still meet a
fragmented allocator or a neighbour job (`launcher=gpu_shared`) that holds more memory than
planned. Losing a 3-hour run to that is worse than running one batch in smaller pieces.

Outputs: a row's output does not depend on which rows share its batch up to the float rounding
of batch composition (`scgmem.llm.backend`), so a split changes nothing on a float32 model and
at most that rounding on bf16; the splits are counted (`OomSplitter.report`, in summary.json
under `generation.oom`) so a run whose batches were split says so.

Example::

    splitter = OomSplitter()
    outs = splitter.run(lambda part: forward([rows[i] for i in part]), list(range(len(rows))))
"""
from __future__ import annotations

import gc
import logging
from typing import Callable, Sequence

import torch

log = logging.getLogger(__name__)


def free_cuda_cache() -> None:
    """Return the caching allocator's free blocks to the driver (a no-op without CUDA), after
    the failed attempt's tensors are garbage: the traceback of the OOM held them."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class OomSplitter:
    """Runs forward batches, halving a batch that raises `torch.OutOfMemoryError`.

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
        except torch.OutOfMemoryError as e:
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
