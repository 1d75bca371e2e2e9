"""CUDA out-of-memory is not fatal: a batch that runs out of memory is halved and retried, with
the same outputs, and counted (scgmem/llm/local/oom.py). The OOM is injected on the CPU."""
import pytest
import torch

from scgmem.llm import LLM
from scgmem.llm.local.oom import OomSplitter


def oom_above(rows: int, times: int | None = None):
    """A batch function that runs out of memory on more than `rows` items (the first `times` times)."""
    calls = []

    def run(items):
        calls.append(list(items))
        if len(items) > rows and (times is None or sum(len(c) > rows for c in calls) <= times):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [x * 10 for x in items]

    return run, calls


def test_split_down_to_what_fits_keeps_order_and_counts():
    freed = []
    splitter = OomSplitter(free_cache=lambda: freed.append(1))
    run, calls = oom_above(2)
    assert splitter.run(run, [1, 2, 3, 4, 5, 6, 7]) == [10, 20, 30, 40, 50, 60, 70]
    # 7 -> 4 + 3 -> (2 + 2) + (2 + 1): three batches were split, the cache freed after each.
    assert splitter.report() == {"splits": 3, "rows_split": 7 + 4 + 3}
    assert len(freed) == 3
    assert [len(c) for c in calls] == [7, 4, 2, 2, 3, 2, 1]


def test_no_oom_no_count_and_one_row_that_does_not_fit_raises():
    splitter = OomSplitter(free_cache=lambda: None)
    run, _ = oom_above(8)
    assert splitter.run(run, [1, 2]) == [10, 20] and splitter.report() == {"splits": 0, "rows_split": 0}
    run, _ = oom_above(0)
    with pytest.raises(torch.OutOfMemoryError, match="one row ran out of GPU memory after 2 halvings"):
        splitter.run(run, [1, 2, 3])


def test_other_errors_are_not_retried():
    splitter = OomSplitter(free_cache=lambda: None)

    def run(items):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        splitter.run(run, [1, 2])
    assert splitter.splits == 0


def inject_oom(model, above_rows: int):
    """Make `model`'s forward raise CUDA OOM on batches of more than `above_rows` rows, as a GPU
    short of memory would (prefill and decode steps alike)."""
    real = model.forward
    seen = []

    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        seen.append(ids.shape[0])
        if ids.shape[0] > above_rows:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
        return real(*args, **kwargs)

    model.forward = forward  # nn.Module.__call__ looks the instance attribute up first
    return seen


@pytest.mark.parametrize("kind", ["greedy", "sampled"])
def test_backend_splits_an_oom_batch_with_the_same_outputs(tiny_model_dir, kind):
    texts = ["Caroline went hiking", "coffee shop by the lake", "What did Melanie paint?", "kids", "art class"]
    kwargs = {"max_new_tokens": 6}
    if kind == "sampled":
        kwargs.update(temperature=0.8, seeds=[11, 12, 13, 14, 15])
    plain = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=8, memo_entries=0,
                prefix_cache=False)
    expected = plain.generate([plain.render(t) for t in texts], **kwargs)
    assert plain.oom.report()["splits"] == 0

    short = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=8, memo_entries=0,
                prefix_cache=False)
    seen = inject_oom(short.model, above_rows=2)
    got = short.generate([short.render(t) for t in texts], **kwargs)
    assert [[g.token_ids for g in row] for row in got] == [[g.token_ids for g in row] for row in expected]
    assert [[g.text for g in row] for row in got] == [[g.text for g in row] for row in expected]
    assert max(seen) > 2  # the injected OOM did fire
    report = short.oom.report()
    assert report["splits"] == 2 and report["rows_split"] == 5 + 3  # 5 -> 3 + 2 -> (2 + 1) + 2
    # Usage counts the prompts once, as without the OOM (the failed attempts are not calls).
    assert short.usage.snapshot()["other"]["calls"] == plain.usage.snapshot()["other"]["calls"] == 5
    short.begin_job()
    assert short.oom.report() == {"splits": 0, "rows_split": 0}  # counted per job
