"""`model.static_cache` / `model.compile`: decode on a static KV cache, optionally compiled.

At 8 rows a Llama-3.2-1B decode step is ~700 kernel launches from Python (12.8 ms on an H200's
host for 3.4 ms of GPU work; issue 29). transformers 5.25 compiles the decode forward when the
cache is static (`StaticCache`: fixed-size buffers written in place); with CUDA graphs (compile
mode reduce-overhead) the step becomes one graph replay. Custom logits processors still run,
outside the compiled forward.

What the harness adds:
- prefix reuse on a static cache: the prefix cache (`scgmem.llm.local.prefix_cache`) keeps batch-1
  DynamicCache states; their K/V are copied into the first `shared` slots of every row, and
  generate feeds the rest of the `[prefix | pads | suffix]` layout as usual.
- buckets: a compiled graph (and a CUDA graph) is specialised to the cache's shape, (rows,
  slots). Rows are padded (copies of the last prompt, whose outputs are dropped) to 1, 2, 4, 8
  and then to a multiple of 8 (a power of two made 17 rows cost 32, issue 40 item 3; below 8 a
  power of two keeps the shapes few where padding costs little), and slots are rounded up to
  256 x a power of two, so a run sees a few shapes, not one per call.
- memory: batches are planned on the padded size (`cost`, used by `scgmem.llm.local.batch_plan`), and
  the kept caches are capped in bytes (`max_batch_tokens` of KV states, less the float32 score
  head's copy, `scgmem.llm.local.score_head`), not in number; `release` drops them all (and CUDA graph
  pools) before an out-of-memory retry (`scgmem.llm.local.oom`).
- churn: a new cache for a shape (or one evicted before) means new buffer addresses, so its CUDA
  graphs are recorded again; torch turns CUDA graphs off for good after 128 re-records of one
  function (inductor's `cudagraph_unexpected_rerecord_limit`). Rebuilds are counted, and past
  `max_rebuilds` a batch whose shape is not kept decodes uncompiled on its static cache instead.
- filled extent: uncompiled, each layer hands attention only the slots filled so far and the
  mask is as wide (`FilledStaticLayer`), so a step reads the tokens it needs, not up to 2x that
  (item 9); a compiled graph needs the fixed width and reads every slot.
- counts (`report`): shapes, caches built / rebuilt / evicted, uncompiled batches, compiled graphs.

Beam search (SCG-Mem's schema-constrained generation) stays on the eager DynamicCache path:
transformers has no compiled beam search, and its beams reorder the cache every step.
"""
from __future__ import annotations

import copy
import logging
from collections import OrderedDict

import torch
from transformers.cache_utils import StaticLayer

from scgmem.llm.local.oom import register_release

log = logging.getLogger(__name__)

MIN_SLOTS = 256
ROW_STEP = 8  # rows beyond 8 pad to a multiple of this
MAX_REBUILDS = 16  # cache rebuilds (CUDA graph re-records) before unkept shapes decode uncompiled; torch's own limit is 128


def row_bucket(rows: int) -> int:
    """Rows padded: 1, 2, 4, 8, then the next multiple of 8."""
    if rows <= ROW_STEP:
        return 1 << max(0, rows - 1).bit_length()
    return -(-rows // ROW_STEP) * ROW_STEP


def slot_bucket(tokens: int) -> int:
    """Cache slots: `tokens` rounded up to 256 x a power of two (at most 2x the need)."""
    slots = MIN_SLOTS
    while slots < tokens:
        slots *= 2
    return slots


def padded_tokens(rows: int, tokens: int) -> int:
    """KV slots a static cache holds for `rows` rows of up to `tokens` tokens (rows x slots after padding)."""
    return row_bucket(rows) * slot_bucket(tokens)


def kv_bytes_per_token(model) -> int:
    """Bytes of K and V per token over all layers (Llama-3.2-3B in bf16: 2 x 28 x 8 x 128 x 2 = 114,688)."""
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    dtype = next(model.parameters()).dtype
    return 2 * config.num_hidden_layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


class FilledStaticLayer(StaticLayer):
    """A StaticLayer that, when `track` is on and nothing is being compiled, hands attention only
    the slots filled so far (`filled`, a host count, so no device sync) and sizes the mask to
    match. Compiled, it behaves as StaticLayer (a fixed width, and no Python value read that
    dynamo would guard on)."""

    track: bool = False
    filled: int = 0

    def _tracking(self) -> bool:
        return self.track and not torch.compiler.is_compiling()

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self._tracking():
            return min(self.filled + query_length, self.max_cache_len), 0
        return super().get_mask_sizes(query_length)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        if not self._tracking():
            return keys, values
        self.filled += key_states.shape[-2]
        return keys[:, :, :self.filled], values[:, :, :self.filled]  # (rows, kv_heads, filled, dim) views

    def reset(self) -> None:
        super().reset()
        self.filled = 0


class StaticDecode:
    """Static caches per (rows, slots) bucket of one model, and the compile settings.

    Args:
        model: the causal LM.
        compile: compile the decode forward (transformers' auto-compile; CUDA graphs on a GPU).
        max_batch_tokens: the memory plan of one batch in padded tokens (`model.max_batch_tokens`);
            the kept caches hold at most that many tokens' KV bytes, less `reserved_bytes`.
        reserved_bytes: memory taken from the same plan by something else (the float32 copy of the
            output head, `ScoreHead.copy_bytes`).
        max_rebuilds: cache rebuilds (CUDA graph re-records) after which a batch whose shape is not
            kept decodes uncompiled.
        backend: torch.compile backend ("inductor"; a callable in tests, to count graphs).
    """

    def __init__(self, model, compile: bool = False, max_batch_tokens: int = 16384, reserved_bytes: int = 0,
                 max_rebuilds: int = MAX_REBUILDS, backend="inductor") -> None:
        self.model = model
        self.compile = compile
        self.backend = backend
        self.token_bytes = kv_bytes_per_token(model)
        self.max_bytes = max(0, max_batch_tokens * self.token_bytes - reserved_bytes)
        self.max_rebuilds = max_rebuilds
        self.caches: OrderedDict[tuple[int, int], object] = OrderedDict()
        self.shapes: set[tuple[int, int]] = set()
        self.built: set[tuple[int, int]] = set()
        self.batches = self.builds = self.rebuilds = self.evictions = self.uncompiled_batches = self.releases = 0
        self._graphs_before: int | None = None
        self._compiled = compile  # whether the batch being prepared compiles
        register_release(self.release)
        if compile:
            import torch._dynamo

            # every bucket may need its own graph; past the limit dynamo would fall back to eager silently
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            self._graphs_before = self._graph_count()

    @staticmethod
    def _graph_count() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"].get("unique_graphs", 0))

    def cost(self, rows: int, tokens: int) -> int:
        """Padded tokens of a batch of `rows` rows of up to `tokens` tokens: what `batch_plan` plans on."""
        return padded_tokens(rows, tokens)

    def cache_bytes(self, key: tuple[int, int]) -> int:
        return key[0] * key[1] * self.token_bytes

    def pad_rows(self, rows: list, seeds: list | None) -> tuple[list, list | None]:
        """`rows` (and their seeds) padded with copies of the last one up to the row bucket."""
        extra = row_bucket(len(rows)) - len(rows)
        return rows + [rows[-1]] * extra, None if seeds is None else list(seeds) + [seeds[-1]] * extra

    def prepare(self, encoded: list, seeds: list | None, config):
        """One batch's rows (`(ids, truncated)` pairs) and seeds padded to the row bucket, and its
        GenerationConfig: compiled unless `compile` is off or the batch's shape would be one more
        rebuild past `max_rebuilds` (then it decodes uncompiled on its static cache, counted)."""
        encoded, seeds = self.pad_rows(encoded, seeds)
        key = (len(encoded), slot_bucket(max(len(ids) for ids, _ in encoded) + config.max_new_tokens))
        compiled = self.compile and (key in self.caches or key not in self.built or self.rebuilds < self.max_rebuilds)
        self.uncompiled_batches += self.compile and not compiled
        self._compiled = compiled
        return encoded, seeds, self.configure(config, compiled)

    def cache_for(self, rows: int, width: int, max_new_tokens: int, prefix=None, shared: int = 0):
        """A reset StaticCache for `rows` x (`width` + `max_new_tokens`) tokens whose first `shared`
        slots hold `prefix` (batch-1 DynamicCache states of exactly `shared` tokens) in every row."""
        from transformers import StaticCache

        key = (rows, slot_bucket(width + max_new_tokens))
        self.shapes.add(key)
        self.batches += 1
        cache = self.caches.pop(key, None)
        if cache is None:
            self._make_room(self.cache_bytes(key))
            cache = StaticCache(config=self.model.config, max_cache_len=key[1])
            for layer in cache.layers:
                if type(layer) is StaticLayer:  # sliding-window layers keep their own class
                    layer.__class__ = FilledStaticLayer
                    layer.track, layer.filled = not self.compile, 0
            self.builds += 1
            self.rebuilds += key in self.built and self._compiled  # a compiled rebuild re-records graphs
            self.built.add(key)
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
                if isinstance(static, FilledStaticLayer):
                    static.filled = shared
        return cache

    def _make_room(self, need: int) -> None:
        """Evict the least recently used caches until `need` more bytes fit the budget (a cache
        larger than the budget alone still gets made: the planner let its batch through)."""
        kept = sum(self.cache_bytes(k) for k in self.caches)
        while self.caches and kept + need > self.max_bytes:
            key, _ = self.caches.popitem(last=False)
            kept -= self.cache_bytes(key)
            self.evictions += 1

    def release(self) -> None:
        """Drop every cache, and the CUDA graphs' memory pools (`empty_cache` does not free those),
        so that an out-of-memory retry starts from the model's weights alone."""
        if not self.caches and not self.compile:
            return
        self.caches.clear()
        self.releases += 1
        if self.compile and torch.cuda.is_available():
            try:
                from torch._inductor.cudagraph_trees import reset_cudagraph_trees

                reset_cudagraph_trees()
            except Exception as e:  # a torch without cudagraph trees: the graphs stay, the caches go
                log.warning("could not reset CUDA graph trees before an OOM retry: %s", e)

    def configure(self, config, compiled: bool | None = None):
        """The call's GenerationConfig with compilation switched on or off (`compiled`, default `compile`)."""
        from transformers.generation.configuration_utils import CompileConfig

        compiled = self.compile if compiled is None else compiled
        config = copy.deepcopy(config)
        config.disable_compile = not compiled
        if compiled:
            cpu = self.model.device.type == "cpu"
            # reduce-overhead = CUDA graphs; on the CPU plain inductor, which transformers only
            # compiles for when told to (`_compile_all_devices`)
            compile_config = CompileConfig(mode="default" if cpu else "reduce-overhead", backend=self.backend)
            compile_config._compile_all_devices = True
            config.compile_config = compile_config
        return config

    def report(self) -> dict:
        """For summary.json: the shapes used, caches built / rebuilt (graphs re-recorded) / evicted,
        batches decoded uncompiled past `max_rebuilds`, graphs dynamo compiled, forward batches served."""
        graphs = None if self._graphs_before is None else self._graph_count() - self._graphs_before
        return {"compile": self.compile, "batches": self.batches,
                "shapes": sorted([list(s) for s in self.shapes]), "compiled_graphs": graphs,
                "cache_builds": self.builds, "cache_rebuilds": self.rebuilds, "cache_evictions": self.evictions,
                "uncompiled_batches": self.uncompiled_batches, "oom_releases": self.releases,
                "max_cache_gib": round(self.max_bytes / 2**30, 3)}
