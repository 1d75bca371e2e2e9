"""Recall's constrained beam search (paper Eq. 11), run in the client against any engine.

A replay of transformers 5.x `GenerationMixin._beam_search` with `length_penalty=0`,
`early_stopping=False`, on the raw log-probs of each beam's allowed trie tokens, so that the same
log-probs give the same beams, scores and ties as the local backend (the same float32 tensors
and `torch.topk` calls): `max(2, 1 + n_eos) * b` candidates of the b x vocab table per step;
the best b that hit no stopping criterion (an end-of-sequence id, or the length cap) run on;
candidates among the first b that hit one join the finished hypotheses; the search stops when
no running beam can beat the worst finished one, or every candidate hit a criterion.

A beam's candidates need the raw log-prob of every allowed token that can reach the top. An
engine that returns a top-n list (llama.cpp's `n_probs`) is asked again with a longer list until
the list holds `min(candidates per step, allowed)` allowed tokens (then any allowed token left out
ranks below every one listed, so the table's top is exact), and refused when its cap is reached.
"""
from __future__ import annotations

from typing import Sequence

import torch

from scgmem.llm import causal
from scgmem.llm.key_rule import RowState
from scgmem.llm.protocol import Generation
from scgmem.llm.served.engines.dialect import NextTokens, Unsupported
from scgmem.llm.served.http_client import BadServerReply
from scgmem.llm.served.keys import KeyDecoder

FIRST_TOP_N = 64
GROWTH = 8


def next_logprobs(decoder: KeyDecoder, prompt_ids: Sequence[int], allowed: list[int], need: int) -> dict[int, float]:
    """Raw log-probs of the allowed tokens that can reach the table's top (see module docstring)."""
    cap = decoder.t.max_top_n
    first = getattr(decoder.t, "first_top_n", None) or FIRST_TOP_N
    top_n = min(first, cap) if cap else first
    wanted = set(allowed)
    while True:
        got: NextTokens = decoder.t.next_tokens(prompt_ids, allowed, top_n)
        decoder.counted()
        outside = [t for t in got.listed if t >= decoder.trie.vocab_size]
        if outside:
            raise BadServerReply(f"{decoder.where}: next-token list: token id {outside[0]}: outside the vocabulary "
                                 f"({decoder.trie.vocab_size} ids)")
        listed = {t: lp for t, lp in got.logprobs.items() if t in wanted}
        if got.complete or len(listed) >= min(need, len(allowed)):
            return listed
        if top_n >= decoder.trie.vocab_size:  # the whole vocabulary was asked for and it is still short
            raise BadServerReply(f"{decoder.where}: next-token list: {len(got.listed)} ids for a top-{top_n} request "
                                 f"over {decoder.trie.vocab_size} ids lack allowed tokens")
        if cap is not None and top_n >= cap:
            raise Unsupported(f"{decoder.where}: the engine's top-{cap} log-probs hold {len(listed)} of the "
                              f"{min(need, len(allowed))} allowed tokens a beam needs; raise its cap (llama.cpp "
                              f"n_probs, vLLM --max-logprobs) or serve token-id log-probs")
        top_n = top_n * GROWTH if cap is None else min(cap, top_n * GROWTH)


def beam_search(decoder: KeyDecoder, prompt_ids: Sequence[int], *, num_beams: int, max_new_tokens: int,
                eos_ids: Sequence[int], num_return_sequences: int) -> list[Generation]:
    """The constrained beam search for one prompt; `num_return_sequences` Generations, best first."""
    b, vocab = num_beams, decoder.trie.vocab_size
    keep = max(2, 1 + len(eos_ids)) * b
    eos = set(int(e) for e in eos_ids)
    prompt = list(prompt_ids)
    # running beams: ids, raw log-probs, walk; all start at the root, only the first one counts
    run = [([], [], RowState(decoder.trie.ROOT)) for _ in range(b)]
    run_scores = torch.zeros(b, dtype=torch.float32)
    run_scores[1:] = -1e9
    fin = [([], [], None) for _ in range(b)]  # finished: ids (end id included), raw log-probs, end log-prob
    fin_scores = torch.full((b,), -1e9, dtype=torch.float32)
    fin_done = torch.zeros(b, dtype=torch.bool)
    top_b = torch.cat([torch.ones(b, dtype=torch.bool), torch.zeros(keep - b, dtype=torch.bool)])
    improvable, length = True, 0
    while True:
        table = torch.full((b, vocab), float("-inf"), dtype=torch.float32)  # (b, vocab) raw log-probs
        live = [(i, ids, decoder.rule.allowed(walk)) for i, (ids, _, walk) in enumerate(run) if run_scores[i] > float("-inf")]
        live = [(i, ids, allowed) for i, ids, allowed in live if allowed]
        # the beams' expansions are independent: in flight side by side (the engine batches them)
        found = causal.map_threads(lambda x: next_logprobs(decoder, prompt + x[1], x[2], keep), live,
                                   max_workers=len(live))
        for (i, _, _), lps in zip(live, found):
            for token, lp in lps.items():
                table[i, token] = lp
        raw = table.clone()
        table = table + run_scores[:, None]
        top_scores, top_index = torch.topk(table.reshape(-1), k=keep)
        beam_of, tokens = (top_index // vocab).tolist(), (top_index % vocab).tolist()
        cands = []
        for i, t in zip(beam_of, tokens):
            ids, lps, walk = run[i]
            cands.append((ids + [t], lps + [float(raw[i, t])], decoder.rule.step(walk, t)))
        hits = torch.tensor([t in eos or length + 1 >= max_new_tokens for t in tokens])
        running_scores = top_scores + hits.to(torch.float32) * -1.0e9
        keep_running = torch.topk(running_scores, k=b)[1].tolist()
        run = [cands[j] for j in keep_running]
        run_scores = running_scores[keep_running]
        # finished hypotheses (length_penalty 0: a score is its sum; early_stopping False)
        just_done = hits & top_b
        cand_scores = top_scores.clone()
        cand_scores += (not improvable) * -1.0e9
        cand_scores += (~just_done).to(torch.float32) * -1.0e9
        merged_scores = torch.cat([fin_scores, cand_scores])
        merged = fin + [(ids, lps, None) for ids, lps, _ in cands]
        merged_done = torch.cat([fin_done, just_done])
        best = torch.topk(merged_scores, k=b)[1].tolist()
        fin, fin_scores, fin_done = [merged[j] for j in best], merged_scores[best], merged_done[best]
        length += 1
        worst = torch.where(fin_done, fin_scores.min(), torch.tensor(-1.0e9))
        improvable = improvable and bool(torch.any(run_scores[0] > worst))
        if not improvable or bool(hits.all()):
            break
    out = []
    for (ids, lps, _), score in zip(fin[:num_return_sequences], fin_scores[:num_return_sequences].tolist()):
        end_lp = None
        cut_at = next((n for n, t in enumerate(ids) if t in eos), None)
        if cut_at is not None:  # the ids stop before the end-of-sequence id, as the local backend's
            end_lp = lps[cut_at] if ids[cut_at] == decoder.c.end_id else None
            ids, lps = ids[:cut_at], lps[:cut_at]
        tracked = end_lp is not None or not ids
        out.append(Generation(text="", token_ids=ids, logprob=score, n_prompt_tokens=len(prompt),
                              cut=cut_at is None and bool(ids), token_logprobs=lps if tracked else None,
                              end_logprob=end_lp))
    return out
