"""Logits processors the backend itself uses: per-prompt seeded sampling and log-prob recording.

Sampling is done with the Gumbel-max trick (argmax(logits/T + Gumbel noise) is a sample
from softmax(logits/T)) inside greedy decoding, with one torch.Generator per row. A
prompt's sample then depends on its own seed only, not on the batch it shares or on a
global RNG stream: runs that resume after a crash, or use another batch size, draw the
same answers.

Both processors keep every tensor on the device of the scores they are handed (the model's
device): nothing is copied to the host during generation. A CUDA run draws other (equally
seeded) noise than a CPU run; each device reproduces itself.

Where the noise comes from (`SeededGumbelSampler(noise=...)`):
- "generator" (the CPU's): one torch.Generator per row, one `torch.rand` per row per step. On a CPU a
  launch costs nothing, and these are the draws every committed CPU run made.
- "counter" (CUDA's, issue 40 item 7): a counter-based hash (splitmix64's finaliser) of (row seed,
  step, token id), computed for all rows by one chain of elementwise kernels whatever the number of
  rows: per-row generators cost one launch per row per step, 32 launches at 32 rows on a host that
  has ~0.6 ms per step in all. The noise is still a function of the row's own seed and the step only.
"""
from __future__ import annotations

import torch
from transformers import LogitsProcessor


class TokenLogprobRecorder(LogitsProcessor):
    """Records log p(chosen token) under the scores it sees (i.e. after the processors
    placed before it, so a constrained distribution is renormalised as in Eq. 6).

    At step t it sees the token chosen at step t-1 in `input_ids`, so it keeps only the
    previous step's log-softmax, (rows, vocab); `finish` gathers the last step.
    """

    def __init__(self, prompt_length: int) -> None:
        self.prompt_length = prompt_length
        self._previous: torch.Tensor | None = None  # (rows, vocab) log-probs of the last step
        self._logprobs: list[torch.Tensor] = []  # each (rows,), on the scores' device

    def _take(self, chosen: torch.Tensor) -> None:
        if self._previous is not None:
            chosen = chosen.to(self._previous.device)
            self._logprobs.append(self._previous.gather(1, chosen[:, None]).squeeze(1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] > self.prompt_length:
            self._take(input_ids[:, -1])
        self._previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def totals(self, sequences: torch.LongTensor, eos_ids: list[int]) -> torch.Tensor:
        """(rows,) sum of recorded log-probs per row, up to and including the row's first EOS,
        on the device the scores were on (`sequences` may be on any device).

        After a row finishes, generate keeps emitting pad tokens for it; those steps are
        masked out.
        """
        new = sequences.shape[1] - self.prompt_length
        if new > len(self._logprobs):
            self._take(sequences[:, self.prompt_length + len(self._logprobs)])
        if not self._logprobs:
            return torch.zeros(sequences.shape[0], device=sequences.device)
        lp = torch.stack(self._logprobs, dim=1)  # (rows, new)
        generated = sequences[:, self.prompt_length:self.prompt_length + lp.shape[1]].to(lp.device)  # (rows, new)
        is_eos = torch.isin(generated, torch.tensor(eos_ids, device=lp.device))
        before_eos = torch.cumsum(is_eos.long(), dim=1) - is_eos.long() == 0  # up to first EOS, inclusive
        lp = torch.where(before_eos & torch.isfinite(lp), lp, torch.zeros_like(lp))
        return lp.sum(dim=1)

    def finish(self, sequences: torch.LongTensor, eos_ids: list[int]) -> list[float]:
        """`totals` as Python floats (one device-to-host copy)."""
        return self.totals(sequences, eos_ids).tolist()


NOISE = ("auto", "generator", "counter")
_GOLDEN, _MIX1, _MIX2 = -7046029254386353131, -4658895280553007687, -7723592293110705685  # splitmix64, as int64


def _logical_shift(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x >> bits as unsigned 64-bit (torch's >> on int64 keeps the sign)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def counter_uniform(seeds: torch.Tensor, step: int, vocab: int) -> torch.Tensor:
    """(rows, vocab) uniforms in (0, 1), each a hash of (seeds[row], step, token): splitmix64's
    finaliser over a 64-bit counter, its top 24 bits. int64 products wrap modulo 2^64 on CPU and CUDA.

    Args:
        seeds: (rows,) int64 on the device.
    """
    counter = torch.arange(vocab, device=seeds.device, dtype=torch.int64) + step * vocab  # (vocab,)
    z = seeds[:, None] * _GOLDEN + counter[None, :] * _MIX2 + _GOLDEN  # (rows, vocab)
    z = (z ^ _logical_shift(z, 30)) * _MIX1
    z = (z ^ _logical_shift(z, 27)) * _MIX2
    z = z ^ _logical_shift(z, 31)
    return (_logical_shift(z, 40).float() + 0.5) * (1.0 / (1 << 24))


class SeededGumbelSampler(LogitsProcessor):
    """Turns greedy decoding into sampling at `temperature`, with one noise stream per row.

    Args:
        seeds: one integer per row (prompt).
        temperature: > 0.
        prompt_length: the padded prompt length (to know the step).
        noise: "generator" (a torch.Generator per row), "counter" (`counter_uniform`, one batched
            computation), or "auto": counter on CUDA, generator elsewhere (module docstring).
    """

    def __init__(self, seeds, temperature: float, prompt_length: int, noise: str = "auto") -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if noise not in NOISE:
            raise ValueError(f"noise={noise!r} is not one of {list(NOISE)}")
        self.temperature = temperature
        self.prompt_length = prompt_length
        self.noise = noise
        self.seeds = [int(s) % (2**63) for s in seeds]
        self.generators: list[torch.Generator] = []
        self._device: torch.device | None = None
        self._seed_tensor: torch.Tensor | None = None

    def _generators_for(self, device: torch.device) -> list[torch.Generator]:
        """One seeded generator per row on `device`, made at the first step. Meta tensors (shape
        checks in tests) hold no values and have no generator: the CPU's stands in there."""
        if self._device != device:
            home = torch.device("cpu") if device.type == "meta" else device
            self.generators = [torch.Generator(device=home).manual_seed(s) for s in self.seeds]
            self._device = device
        return self.generators

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows, vocab = scores.shape
        if rows != len(self.seeds):
            raise ValueError(f"got {rows} rows but {len(self.seeds)} seeds")
        counter = self.noise == "counter" or (self.noise == "auto" and scores.device.type == "cuda")
        if counter:
            if self._seed_tensor is None or self._seed_tensor.device != scores.device:
                self._seed_tensor = torch.tensor(self.seeds, dtype=torch.int64).to(scores.device)  # once per call
            u = counter_uniform(self._seed_tensor, input_ids.shape[1] - self.prompt_length, vocab)  # (rows, vocab)
        else:
            generators = self._generators_for(scores.device)
            u = torch.stack([torch.rand(vocab, generator=g, device=scores.device) for g in generators])  # (rows, vocab)
        exponential = (-torch.log(u.clamp_min(1e-20))).clamp_min(1e-20)  # -log(u) ~ Exp(1), > 0
        gumbel = -torch.log(exponential)
        return scores.float() / self.temperature + gumbel
