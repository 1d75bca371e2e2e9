"""The local GPU path's defects that only CUDA would show, shown on the CPU (issue 40): graphs
compiled per scored step, static-cache prefill handing SDPA unequal lengths, static caches past
the memory plan, out-of-memory errors that are not the allocator's, bucket churn, every slot read."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from scgmem.llm.local.gqa_attention import gqa_sdpa_forward
from scgmem.llm.local.oom import OomSplitter, is_out_of_memory
from scgmem.llm.local.score_head import ScoreHead
from scgmem.llm.local.static_decode import StaticDecode, kv_bytes_per_token, row_bucket, slot_bucket

SHARED = "Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired. " * 3
QUESTIONS = ["What did Caroline research?", "When did Melanie run a charity race?", "coffee", "Where is the lake?",
             "Who painted?", "What did they eat?", "Why camping?", "Which book?", "Whose dog?", "When?"]


class TinyLM(torch.nn.Module):
    """A body and an output head: the part of a causal LM that ScoreHead touches."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)

    def get_output_embeddings(self):
        return self.head

    def forward(self, x):
        return self.head(self.body(x))


def counting_backend(graphs: list):
    def backend(gm, example_inputs):  # each call is one graph dynamo compiled
        graphs.append(gm)
        return gm.forward
    return backend


# ---------------------------------------------------------------- item 1: recompiles on every step
def test_scored_steps_compile_one_graph_across_two_calls():
    import torch._dynamo

    torch._dynamo.reset()
    graphs: list = []
    model = TinyLM().to(torch.bfloat16)
    head = ScoreHead(model)
    compiled = torch.compile(model, backend=counting_backend(graphs))
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    for _ in range(2):  # two scored calls of 12 steps each
        with head.float32():
            for _ in range(12):
                assert compiled(x).dtype == torch.float32
    assert len(graphs) == 1, f"{len(graphs)} graphs for two scored calls"
    assert compiled(x).dtype == torch.bfloat16 and len(graphs) == 2  # the unscored variant: one more
    assert head.calls == 2
    torch._dynamo.reset()


def test_compiled_llm_scored_calls_reuse_one_graph(tiny_model_dir):
    """The same through `LLM.generate` on a compiled static cache (bf16, a processor: a scored call)."""
    import torch._dynamo
    from transformers import LogitsProcessor

    class Noop(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores

    torch._dynamo.reset()
    llm = make(tiny_model_dir, dtype="bfloat16", compile=True, prefix_cache=False, batch_size=4)
    graphs: list = []
    llm.static.backend = counting_backend(graphs)
    prompts = [llm.render("Caroline went to the support group. What did she do?")] * 2
    for _ in range(2):
        llm.generate(prompts, max_new_tokens=12, processors=lambda width, rows: [Noop()])
    assert len(graphs) == 1 and llm.score_head.calls == 2
    llm.generate(prompts, max_new_tokens=12)  # unscored: the bf16 head's graph
    assert len(graphs) == 2 and llm.static.report()["compiled_graphs"] == 2
    torch._dynamo.reset()


# ---------------------------------------------------------------- item 6: head on another device
def test_float32_head_moves_the_hidden_state_to_the_heads_device():
    with torch.device("meta"):  # stands in for a head placed on another GPU by device_map=auto
        model = TinyLM().to(torch.bfloat16)
    head = ScoreHead(model)
    with head.float32():
        out = model.head(torch.randn(2, 8, dtype=torch.bfloat16))  # hidden state on the CPU
    assert out.device.type == "meta" and out.dtype == torch.float32
    assert head.copy_bytes == 16 * 8 * 4 and ScoreHead(TinyLM()).copy_bytes == 0  # float32 model: no copy


# ---------------------------------------------------------------- item 2: SDPA lengths on static prefill
def test_static_prefill_without_mask_hands_sdpa_equal_lengths(monkeypatch):
    seen = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append((q.shape[2], k.shape[2], kw.get("attn_mask") is None, kw.get("is_causal")))
        return real(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    module = type("Attention", (), {"num_key_value_groups": 2, "is_causal": True})()
    q, kv = torch.randn(1, 4, 82, 16), torch.randn(1, 2, 256, 16)  # 82 prompt tokens, 256 static slots
    kv[:, :, 82:] = 0  # unfilled slots
    out, _ = gqa_sdpa_forward(module, q, kv, kv, None, scaling=0.25, is_causal=True)
    assert seen == [(82, 82, True, True)]
    reference = real(q, kv[:, :, :82].repeat_interleave(2, 1), kv[:, :, :82].repeat_interleave(2, 1),
                     is_causal=True, scale=0.25).transpose(1, 2)
    torch.testing.assert_close(out, reference)


# ---------------------------------------------------------------- item 3: memory of static caches
def make(tiny_model_dir, **kw):
    from scgmem.llm import LLM

    return LLM(name="tiny", path=str(tiny_model_dir), context_window=1024, memo_entries=0, **kw)


def prompts(llm, n):
    return [llm.render(f"Context: {SHARED}\nQuestion: {q}") for q in QUESTIONS[:n]]


def test_row_buckets_are_multiples_of_eight_past_eight():
    assert [row_bucket(n) for n in (1, 2, 3, 5, 8, 9, 17, 24, 25)] == [1, 2, 4, 8, 8, 16, 24, 24, 32]


def test_static_batches_are_planned_on_padded_sizes_and_caches_capped_in_bytes(tiny_model_dir):
    llm = make(tiny_model_dir, static_cache=True, prefix_cache=False, batch_size=16, max_batch_tokens=2048)
    shapes = []
    cache_for = llm.static.cache_for
    llm.static.cache_for = lambda rows, width, new, *a: shapes.append((rows, width, new)) or cache_for(rows, width, new, *a)
    kept = []
    for n in (10, 3, 1, 2):
        llm.generate(prompts(llm, n), max_new_tokens=4)
        kept.append(sum(rows * slots for rows, slots in llm.static.caches))  # float32 model: no head copy
    assert shapes and all(rows * slot_bucket(width + new) <= 2048 for rows, width, new in shapes), shapes
    assert max(kept) <= 2048, kept


def test_budget_counts_the_float32_head_copy(tiny_model_dir):
    llm = make(tiny_model_dir, static_cache=True, dtype="bfloat16", max_batch_tokens=4096)
    assert llm.score_head.copy_bytes > 0
    assert llm.static.max_bytes == 4096 * kv_bytes_per_token(llm.model) - llm.score_head.copy_bytes


def test_static_caches_are_dropped_before_an_oom_retry(tiny_model_dir):
    llm = make(tiny_model_dir, static_cache=True, prefix_cache=False, batch_size=4, max_batch_tokens=1 << 20)
    real = llm.model.forward
    kept_at_retry = []

    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        kept_at_retry.append(sorted(llm.static.caches))
        return real(*args, **kwargs)

    llm.model.forward = forward
    outs = llm.generate(prompts(llm, 3), max_new_tokens=3)
    assert len(outs) == 3 and llm.oom.report()["splits"] == 1
    assert all(rows <= 2 for shapes in kept_at_retry for rows, _ in shapes), kept_at_retry  # the 4-row cache went


# ---------------------------------------------------------------- item 4: OOM that is not the allocator's
@pytest.mark.parametrize("error", [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    RuntimeError("Triton Error [CUDA]: out of memory"),
    torch.AcceleratorError("CUDA error: out of memory"),
], ids=["allocator", "cuda", "cublas", "cudnn", "triton", "accelerator"])
def test_every_kind_of_oom_splits_and_releases(error):
    released = []
    splitter = OomSplitter(free_cache=lambda: released.append(1))

    def run(items):
        if len(items) > 1:
            raise error
        return [x * 10 for x in items]

    assert is_out_of_memory(error)
    assert splitter.run(run, [1, 2]) == [10, 20] and splitter.splits == 1 and released == [1]


def test_other_runtime_errors_are_not_oom():
    assert not is_out_of_memory(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_out_of_memory(ValueError("out of memory"))  # not a RuntimeError: a bug, not the device


# ---------------------------------------------------------------- item 8: bucket churn, counted and bounded
def test_bucket_churn_is_counted_and_bounded(tiny_model_dir):
    from transformers import GenerationConfig

    llm = make(tiny_model_dir)
    static = StaticDecode(llm.model, compile=True, max_batch_tokens=1024, max_rebuilds=2)
    rows = {1: [([1] * 100, False)], 2: [([1] * 100, False)] * 2, 4: [([1] * 100, False)] * 4}
    compiled = []
    for n in (4, 2, 4, 2, 4, 2, 4):  # 4 x 256 slots fills the budget: each shape evicts the other
        encoded, _, config = static.prepare(rows[n], None, GenerationConfig(max_new_tokens=8))
        compiled.append(not config.disable_compile)
        static.cache_for(len(encoded), 100, 8)
    report = static.report()
    assert report["cache_evictions"] == 6 and report["cache_rebuilds"] == 2
    assert compiled == [True, True, True, True, False, False, False] and report["uncompiled_batches"] == 3


# ---------------------------------------------------------------- item 9: read only the filled slots
def test_uncompiled_static_decode_reads_only_filled_slots(tiny_model_dir, monkeypatch):
    eager = make(tiny_model_dir, prefix_cache=True, prefix_cache_min_tokens=8, batch_size=4)
    static = make(tiny_model_dir, prefix_cache=True, prefix_cache_min_tokens=8, batch_size=4, static_cache=True)
    keys = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        keys.append(k.shape[2])
        return real(q, k, v, **kw)

    calls = [prompts(eager, 3), prompts(eager, 1), prompts(eager, 3)]  # the second reuses the prefix
    expected = [eager.generate(c, max_new_tokens=6) for c in calls]
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    got = [static.generate(c, max_new_tokens=6) for c in calls]
    assert [[g[0].token_ids for g in out] for out in got] == [[g[0].token_ids for g in out] for out in expected]
    longest = max(len(static.encode(p)) for c in calls for p in c) + 6
    assert keys and max(keys) <= longest < min(slots for _, slots in static.static.shapes), (max(keys), longest)
