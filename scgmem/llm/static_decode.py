"""`model.static_cache` / `model.compile`: decode on a static KV cache, optionally compiled.

At 8 rows a Llama-3.2-1B decode step is ~700 kernel launches from Python (12.8 ms on an H200's
host for 3.4 ms of GPU work; issue 29). transformers 5.25 compiles the decode forward when the
cache is static (`StaticCache`: fixed-size buffers written in place); with CUDA graphs (compile
mode reduce-overhead) the step becomes one graph replay. Custom logits processors still run,
outside the compiled forward.

What the harness adds:
- prefix reuse on a static cache: the prefix cache (`scgmem.llm.prefix_cache`) keeps batch-1
  DynamicCache states; their K/V are copied into the first `shared` slots of every row, and
  generate feeds the rest of the `[prefix | pads | suffix]` layout as usual.
- buckets: a compiled graph (and a CUDA graph) is specialised to the cache's shape, (rows,
  slots). Rows are padded up to a power of two (copies of the last prompt, whose outputs are
  dropped) and slots rounded up to 256 x a power of two, so a run sees a few shapes, not one per
  call. One StaticCache per shape is kept and reset between calls: a compiled graph also holds
  on to the buffers' addresses, and a new buffer would mean a new graph.
- counts: shapes seen, compiled graphs (dynamo's counter) and batches served (`report`).

Beam search (SCG-Mem's schema-constrained generation) stays on the eager DynamicCache path:
transformers has no compiled beam search, and its beams reorder the cache every step.
"""
from __future__ import annotations

import copy
from collections import OrderedDict

import torch

MIN_SLOTS = 256


def row_bucket(rows: int) -> int:
    """Rows padded to the next power of two."""
    return 1 << max(0, rows - 1).bit_length()


def slot_bucket(tokens: int) -> int:
    """Cache slots: `tokens` rounded up to 256 x a power of two (at most 2x the need)."""
    slots = MIN_SLOTS
    while slots < tokens:
        slots *= 2
    return slots


class StaticDecode:
    """Static caches per (rows, slots) bucket of one model, and the compile settings.

    Args:
        model: the causal LM.
        compile: compile the decode forward (transformers' auto-compile; CUDA graphs on a GPU).
        max_caches: static caches kept (least recently used first out); each holds
            rows x slots x layers x 2 x kv_heads x head_dim x dtype bytes.
    """

    def __init__(self, model, compile: bool = False, max_caches: int = 4) -> None:
        self.model = model
        self.compile = compile
        self.max_caches = max_caches
        self.caches: OrderedDict[tuple[int, int], object] = OrderedDict()
        self.shapes: set[tuple[int, int]] = set()
        self.batches = 0
        self._graphs_before: int | None = None
        if compile:
            import torch._dynamo

            # every bucket may need its own graph; past the limit dynamo would fall back to eager silently
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            self._graphs_before = self._graph_count()

    @staticmethod
    def _graph_count() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"].get("unique_graphs", 0))

    def pad_rows(self, rows: list, seeds: list | None) -> tuple[list, list | None]:
        """`rows` (and their seeds) padded with copies of the last one up to the row bucket."""
        extra = row_bucket(len(rows)) - len(rows)
        return rows + [rows[-1]] * extra, None if seeds is None else list(seeds) + [seeds[-1]] * extra

    def cache_for(self, rows: int, width: int, max_new_tokens: int, prefix=None, shared: int = 0):
        """A reset StaticCache for `rows` x (`width` + `max_new_tokens`) tokens whose first `shared`
        slots hold `prefix` (batch-1 DynamicCache states of exactly `shared` tokens) in every row."""
        from transformers import StaticCache

        key = (rows, slot_bucket(width + max_new_tokens))
        self.shapes.add(key)
        self.batches += 1
        cache = self.caches.pop(key, None)
        if cache is None:
            while len(self.caches) >= self.max_caches:
                self.caches.popitem(last=False)
            cache = StaticCache(config=self.model.config, max_cache_len=key[1])
        else:
            cache.reset()
        self.caches[key] = cache
        if prefix is not None and shared:
            for static, kept in zip(cache.layers, prefix.layers):
                if not static.is_initialized:
                    k, v = kept.keys, kept.values
                    static.lazy_initialization(k.expand(rows, *k.shape[1:]), v.expand(rows, *v.shape[1:]))
                static.keys[:, :, :shared].copy_(kept.keys.expand(rows, -1, -1, -1))
                static.values[:, :, :shared].copy_(kept.values.expand(rows, -1, -1, -1))
                static.cumulative_length.fill_(shared)
        return cache

    def configure(self, config):
        """The call's GenerationConfig with compilation switched on or off."""
        from transformers.generation.configuration_utils import CompileConfig

        config = copy.deepcopy(config)
        config.disable_compile = not self.compile
        if self.compile:
            cpu = self.model.device.type == "cpu"
            # reduce-overhead = CUDA graphs; on the CPU plain inductor, which transformers only
            # compiles for when told to (`_compile_all_devices`)
            compile_config = CompileConfig(mode="default" if cpu else "reduce-overhead")
            compile_config._compile_all_devices = True
            config.compile_config = compile_config
        return config

    def report(self) -> dict:
        """For summary.json: the shapes used, how many graphs dynamo compiled, the forward batches served."""
        graphs = None if self._graphs_before is None else self._graph_count() - self._graphs_before
        return {"compile": self.compile, "batches": self.batches,
                "shapes": sorted([list(s) for s in self.shapes]), "compiled_graphs": graphs}
