"""Logits processors the backend itself uses: per-prompt seeded sampling and log-prob recording.

Sampling is done with the Gumbel-max trick (argmax(logits/T + Gumbel noise) is a sample
from softmax(logits/T)) inside greedy decoding, with one torch.Generator per row. A
prompt's sample then depends on its own seed only, not on the batch it shares or on a
global RNG stream: runs that resume after a crash, or use another batch size, draw the
same answers.
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
        self._logprobs: list[torch.Tensor] = []  # each (rows,)

    def _take(self, chosen: torch.Tensor) -> None:
        if self._previous is not None:
            self._logprobs.append(self._previous.gather(1, chosen[:, None]).squeeze(1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] > self.prompt_length:
            self._take(input_ids[:, -1])
        self._previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, sequences: torch.LongTensor, eos_ids: list[int]) -> list[float]:
        """Sum of recorded log-probs per row, up to and including the row's first EOS.

        After a row finishes, generate keeps emitting pad tokens for it; those steps are
        masked out.
        """
        new = sequences.shape[1] - self.prompt_length
        if new > len(self._logprobs):
            self._take(sequences[:, self.prompt_length + len(self._logprobs)])
        if not self._logprobs:
            return [0.0] * sequences.shape[0]
        lp = torch.stack(self._logprobs, dim=1)  # (rows, new)
        generated = sequences[:, self.prompt_length:self.prompt_length + lp.shape[1]]  # (rows, new)
        is_eos = torch.isin(generated, torch.tensor(eos_ids, device=generated.device))
        before_eos = torch.cumsum(is_eos.long(), dim=1) - is_eos.long() == 0  # up to first EOS, inclusive
        lp = torch.where(before_eos & torch.isfinite(lp), lp, torch.zeros_like(lp))
        return lp.sum(dim=1).tolist()


class SeededGumbelSampler(LogitsProcessor):
    """Turns greedy decoding into sampling at `temperature`, with one generator per row.

    Args:
        seeds: one integer per row (prompt).
        temperature: > 0.
        prompt_length: the padded prompt length (to know the step).
    """

    def __init__(self, seeds, temperature: float, prompt_length: int) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.generators = [torch.Generator().manual_seed(int(s) % (2**63)) for s in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows, vocab = scores.shape
        if rows != len(self.generators):
            raise ValueError(f"got {rows} rows but {len(self.generators)} seeds")
        u = torch.stack([torch.rand(vocab, generator=g) for g in self.generators])  # (rows, vocab)
        exponential = (-torch.log(u.clamp_min(1e-20))).clamp_min(1e-20)  # -log(u) ~ Exp(1), > 0
        gumbel = -torch.log(exponential)
        return scores.float() / self.temperature + gumbel.to(scores.device)
