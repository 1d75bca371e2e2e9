"""Constrained `generate` of the served backend: a `KeyConstraint` on a serving engine.

`ConstrainedCalls` holds the engine's dialect (`engines.make_dialect`) and the server pool;
`generate` runs one `KeyDecoder` per prompt (greedy lists key by key, or the client-side beam search), every
prompt on its own thread, so their requests are in flight side by side (a serving engine batches them); the
pool's `InFlightLimiter` bounds the requests, not the threads (a waiting thread holds no slot, so the
nested pools of beams and id chunks cannot deadlock). Results are assembled in prompt order, so a
deterministic engine gives the same lists run after run, whatever `model.max_in_flight`.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

from scgmem.llm import causal
from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.protocol import Generation, check_generate_args
from scgmem.llm.served.beams import beam_search
from scgmem.llm.served.engines.dialect import EngineDialect
from scgmem.llm.served.keys import KeyDecoder
from scgmem.llm.served.transport import HttpTransport, ServerPool


class ConstrainedCalls:
    """Args:
        dialect / pool: the engine and its servers.
        eos_ids: the served model's end-of-sequence ids (beam width, as transformers keeps it).

    `requests`: server requests of every call so far; `last_requests()`: those of the calling
    thread's last `generate` (several calls may run at once, from the batching front).
    """

    # threads for one call's prompts: a bound on threads only; requests are bounded by the limiter
    MAX_THREADS = 256

    def __init__(self, dialect: EngineDialect, pool: ServerPool, *, eos_ids: Sequence[int]) -> None:
        self.dialect, self.pool, self.eos_ids = dialect, pool, list(eos_ids)
        self.requests = 0
        self._lock, self._local = threading.Lock(), threading.local()

    def last_requests(self) -> int:
        return getattr(self._local, "requests", 0)

    def generate(self, prompt_ids: Sequence[list[int]], constraint: KeyConstraint, *, max_new_tokens: int,
                 temperature: float, seeds: Sequence[int], num_beams: int, num_return_sequences: int,
                 decode: Callable[[list[int]], str]) -> list[list[Generation]]:
        check_generate_args(len(prompt_ids), temperature=temperature, seeds=seeds, num_beams=num_beams,
                            num_return_sequences=num_return_sequences)

        def one(i: int) -> tuple[list[Generation], int]:
            decoder = KeyDecoder(HttpTransport(self.pool, self.dialect, affinity=i), constraint,
                                 where=self.pool.urls[0])
            if num_beams > 1:
                gens = beam_search(decoder, prompt_ids[i], num_beams=num_beams, max_new_tokens=max_new_tokens,
                                   eos_ids=self.eos_ids, num_return_sequences=num_return_sequences)
            else:
                gens = [decoder.greedy(prompt_ids[i], max_new_tokens=max_new_tokens, temperature=temperature,
                                       seed=int(seeds[i]))]
            for g in gens:
                g.text = decode(g.token_ids).strip()
            return gens, decoder.requests

        done = causal.map_threads(one, range(len(prompt_ids)), max_workers=min(self.MAX_THREADS, len(prompt_ids)))
        self._local.requests = sum(n for _, n in done)
        with self._lock:
            self.requests += self._local.requests
        return [gens for gens, _ in done]
