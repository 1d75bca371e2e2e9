"""Device placement of the backend's tensors, checked on the meta device.

Mixing a meta tensor with a CPU tensor in one operation raises, as mixing a CUDA tensor with a
CPU one does, so these tests catch on a CPU-only machine what would crash on a GPU.
"""
import pytest
import torch
from transformers import DynamicCache, LlamaConfig

from scgmem.llm.local.schema_processor import SchemaConstraint
from scgmem.llm.local.key_tracker import KeyTracker
from scgmem.core.schema import TokenTrie
from scgmem.llm.local.prefix_cache import layout_batch
from scgmem.llm.local.sampling import SeededGumbelSampler, TokenLogprobRecorder

META = torch.device("meta")
EOS = [6]


def test_meta_mixes_with_cpu_raise():
    with pytest.raises(RuntimeError):
        torch.zeros(2, device=META) + torch.zeros(2)


def test_recorder_keeps_the_scores_device_and_takes_host_sequences():
    recorder = TokenLogprobRecorder(prompt_length=3)
    for step in range(3):
        recorder(torch.zeros((2, 3 + step), dtype=torch.long, device=META), torch.zeros((2, 7), device=META))
    sequences = torch.tensor([[1, 2, 3, 4, 6, 0], [1, 2, 3, 5, 5, 5]])  # on the host, as generate may return
    totals = recorder.totals(sequences, EOS)
    assert totals.device == META and totals.shape == (2,)


def test_recorder_values_on_cpu():
    recorder = TokenLogprobRecorder(prompt_length=1)
    scores = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))
    recorder(torch.tensor([[0], [0]]), scores)
    recorder(torch.tensor([[0, 1], [0, 2]]), scores)
    totals = recorder.finish(torch.tensor([[0, 1, 2], [0, 2, 2]]), eos_ids=[2])
    assert totals == pytest.approx([float(torch.log(torch.tensor(0.25 * 0.25))),
                                    float(torch.log(torch.tensor(0.8)))])  # row 2 stops at its first EOS


def test_sampler_draws_noise_on_the_scores_device():
    sampler = SeededGumbelSampler([1, 2], temperature=0.7, prompt_length=3)
    out = sampler(torch.zeros((2, 3), dtype=torch.long, device=META), torch.zeros((2, 11), device=META))
    assert out.device == META and out.shape == (2, 11)


def test_sampler_on_cpu_draws_the_seeded_cpu_stream():
    scores = torch.randn(2, 50)
    out = SeededGumbelSampler([5, 9], temperature=0.5, prompt_length=0)(torch.zeros((2, 0), dtype=torch.long), scores)
    expected = []
    for seed, row in zip([5, 9], scores):
        u = torch.rand(50, generator=torch.Generator().manual_seed(seed))
        expected.append(row / 0.5 - torch.log((-torch.log(u.clamp_min(1e-20))).clamp_min(1e-20)))
    torch.testing.assert_close(out, torch.stack(expected))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sampler_noise_lives_on_cuda():
    sampler = SeededGumbelSampler([1], temperature=1.0, prompt_length=0)  # auto: counter noise on CUDA
    out = sampler(torch.zeros((1, 0), dtype=torch.long, device="cuda"), torch.zeros((1, 9), device="cuda"))
    assert out.device.type == "cuda" and sampler._seed_tensor.device.type == "cuda" and not sampler.generators
    sampler = SeededGumbelSampler([1], temperature=1.0, prompt_length=0, noise="generator")
    out = sampler(torch.zeros((1, 0), dtype=torch.long, device="cuda"), torch.zeros((1, 9), device="cuda"))
    assert out.device.type == "cuda" and all(g.device.type == "cuda" for g in sampler.generators)


def trie() -> TokenTrie:
    t = TokenTrie(vocab_size=8, dense_threshold=2)  # the root is dense: its row is copied to the device
    for key in ([1, 3], [2, 3], [4, 5, 3]):
        t.insert(key)
    return t


def test_constraint_masks_on_the_scores_device():
    tracker = KeyTracker(trie(), terminator=3, eos_ids=EOS, max_keys=2)
    proc = SchemaConstraint(tracker, prompt_length=2, pad_id=0, record_logprobs=False)
    # token ids stay on the host here (meta tensors hold no values to walk the trie with)
    for generated in ([], [4], [4, 5], [4, 5, 3]):
        ids = torch.tensor([[7, 7, *generated], [7, 7, *generated]])
        out = proc(ids, torch.zeros((2, 8), device=META))
        assert out.device == META and out.shape == (2, 8)


def test_constraint_records_logprobs_on_cpu_in_one_fetch():
    proc = SchemaConstraint(KeyTracker(trie(), terminator=3, eos_ids=EOS, max_keys=1), prompt_length=1, pad_id=0)
    scores = torch.log_softmax(torch.randn(1, 8), -1)
    masked = proc(torch.tensor([[7]]), scores)
    assert torch.isinf(masked[0, [0, 3, 5, 6, 7]]).all() and torch.isfinite(masked[0, [1, 2, 4]]).all()
    proc(torch.tensor([[7, 4]]), scores)
    state, row, _ = proc.tracker.entries[(0, (4,))]
    assert row == 0 and state.key_logprob == pytest.approx(float(scores[0, 4]), abs=1e-6)


def test_prefix_layout_on_the_device_with_device_states():
    rows = [[1, 2, 3, 4, 5], [1, 2, 3, 9]]
    ids, mask = layout_batch(rows, shared=3, pad_id=0, device=torch.device("cpu"))
    assert ids.tolist() == [[1, 2, 3, 4, 5], [1, 2, 3, 0, 9]] and mask.tolist() == [[1] * 5, [1, 1, 1, 0, 1]]
    ids, mask = layout_batch(rows, shared=3, pad_id=0, device=META)
    assert ids.device == META and mask.device == META
    config = LlamaConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=16)
    states = DynamicCache(config=config)
    states.update(torch.zeros((1, 1, 3, 4), device=META), torch.zeros((1, 1, 3, 4), device=META), 0)
    states.batch_repeat_interleave(len(rows))
    keys = states.layers[0].keys
    assert keys.shape[0] == 2 and (keys.sum(dim=(1, 2, 3)) * mask[:, :3].sum(1)).device == META
