"""An engine in this process: the local transformers model, constrained by llguidance's own
token bitmask compiled from our Lark grammar (llguidance's Python package and its torch helpers).

It answers the same three questions as a server (`keys.Transport`), on the same logits as the
local backend, so comparing the two proves the grammar compiler and the client-side beam search
apart from any engine's numerics (tests/llm/test_served_exactness.py). Raw log-probs are computed
as the local processor computes them: logits - logsumexp for greedy calls, log_softmax (what
transformers' beam search hands its processors) for beam expansions.
"""
from __future__ import annotations

from typing import Sequence

import torch

from scgmem.llm.served.engines.dialect import Continuation, NextTokens


class GuidanceLocal:
    """Args:
        llm: a local `scgmem.llm.LLM` (its `model` and `tokenizer`).
    """

    max_top_n = None

    def __init__(self, llm) -> None:
        import llguidance
        import llguidance.hf

        self.llm, self._ll = llm, llguidance
        self.lltok = llguidance.hf.from_tokenizer(llm.tokenizer, n_vocab=llm.vocab_size)
        self.grammars = 0

    @torch.inference_mode()
    def _logits(self, ids: Sequence[int]) -> torch.Tensor:
        model = self.llm.model
        x = torch.tensor([list(ids)], device=model.device)
        return model(input_ids=x).logits[0, -1].float()  # (vocab,)

    def continue_(self, prompt_ids, grammar, *, max_tokens, temperature, seed) -> Continuation:
        from llguidance.torch import allocate_token_bitmask, apply_token_bitmask_inplace, fill_next_token_bitmask

        ll = self._ll
        matcher = ll.LLMatcher(self.lltok, ll.LLMatcher.grammar_from_lark(grammar))
        if matcher.is_error():
            raise ValueError(f"grammar refused by llguidance: {matcher.get_error()}")
        self.grammars += 1
        mask = allocate_token_bitmask(1, self.lltok.vocab_size)
        ids, lps = list(prompt_ids), []
        for _ in range(max_tokens):
            logits = self._logits(ids)
            raw = logits - torch.logsumexp(logits, dim=-1)
            fill_next_token_bitmask(matcher, mask, 0)
            masked = logits[None].clone()
            apply_token_bitmask_inplace(masked, mask)
            token = int(masked[0].argmax())
            ids.append(token)
            lps.append(float(raw[token]))
            matcher.consume_token(token)
            if matcher.is_stopped() or matcher.is_accepting():  # a key grammar accepts right after its ending
                break
        return Continuation(ids[len(prompt_ids):], lps, "stop" if len(lps) < max_tokens else "length")

    def next_tokens(self, prompt_ids, allowed, top_n) -> NextTokens:
        raw = torch.log_softmax(self._logits(prompt_ids), dim=-1)
        return NextTokens({int(t): float(raw[t]) for t in allowed}, complete=True)

    def score(self, prompt_ids, continuation) -> list[float]:
        ids, out = list(prompt_ids), []
        for t in continuation:
            logits = self._logits(ids)
            out.append(float(logits[t] - torch.logsumexp(logits, dim=-1)))
            ids.append(int(t))
        return out


class GuidanceLocalLLM:
    """The local `LLM` with its constrained calls answered through `GuidanceLocal` and the
    client-side `KeyDecoder` / beam search, exactly as a served model's are; free text stays local."""

    def __init__(self, llm) -> None:
        self._llm = llm
        self.engine = GuidanceLocal(llm)

    def __getattr__(self, name):
        return getattr(self._llm, name)

    def generate(self, prompts, *, constraint=None, **kwargs):
        if constraint is None:
            return self._llm.generate(prompts, **kwargs)
        from scgmem.llm.served.beams import beam_search
        from scgmem.llm.served.keys import KeyDecoder

        out = []
        max_new, beams = kwargs.get("max_new_tokens", 64), kwargs.get("num_beams", 1)
        for prompt in prompts:
            ids = self._llm.encode(prompt)
            decoder = KeyDecoder(self.engine, constraint, where="in-process llguidance")
            if beams > 1:
                gens = beam_search(decoder, ids, num_beams=beams, max_new_tokens=max_new, eos_ids=self._llm.eos_ids,
                                   num_return_sequences=kwargs.get("num_return_sequences", beams))
            else:
                gens = [decoder.greedy(ids, max_new_tokens=max_new)]
            for g in gens:
                g.text = self._llm.tokenizer.decode(g.token_ids, skip_special_tokens=True).strip()
            out.append(gens)
        return out
