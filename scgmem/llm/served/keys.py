"""Constrained key lists on an engine the client cannot reach inside: greedy lists key by key
under a token-id grammar, and the constrained beam search run in the client.

A `Transport` answers the three questions of `dialect` (a grammar-constrained continuation,
raw next-token log-probs, raw scores of a given continuation) for one engine, over HTTP or
in process. `KeyDecoder` turns a `KeyConstraint` into those questions and the answers into
`Generation`s with the same ids, raw `token_logprobs` and `end_logprob` the local backend gives:

* greedy (assimilation): one continuation per key, under the grammar of the keys still
  allowed (`lark_trie.key_grammar`: a distinct list drops the keys it holds), until the end id;
* beam search (recall, Eq. 11): transformers' beam search (5.x `_beam_search`: top
  `max(2, 1 + n_eos) * b` candidates of b x vocab, early stopping when no running beam can beat
  the worst finished one, length_penalty 0), with each beam's candidates the raw log-probs of
  the trie node's allowed tokens. No engine offers constrained beam search over HTTP (vLLM's
  `use_beam_search` does not combine with structured outputs; SGLang and llama.cpp have none).

Every key a server returns is walked through the trie again: a token outside the grammar is a
bad reply, never a key.
"""
from __future__ import annotations

import threading
from typing import Protocol, Sequence

from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.key_rule import DONE, KeyRule, RowState
from scgmem.llm.protocol import Generation
from scgmem.llm.served.engines.dialect import Continuation, NextTokens
from scgmem.llm.served.http_client import BadServerReply
from scgmem.llm.served.lark_trie import key_grammar


class Transport(Protocol):
    max_top_n: int | None

    def continue_(self, prompt_ids: Sequence[int], grammar: str, *, max_tokens: int, temperature: float,
                  seed: int) -> Continuation: ...

    def next_tokens(self, prompt_ids: Sequence[int], allowed: Sequence[int], top_n: int) -> NextTokens: ...

    def score(self, prompt_ids: Sequence[int], continuation: Sequence[int]) -> list[float]: ...


class KeyDecoder:
    """Args:
        transport: the engine.
        constraint: what may be generated; its rule (`KeyRule`) walks every prefix.
        where: the server, for error messages until the transport names the one that replied.
    """

    def __init__(self, transport: Transport, constraint: KeyConstraint, *, where: str) -> None:
        self.t, self.c, self._where = transport, constraint, where
        self.trie = constraint.trie
        self.rule = KeyRule.of(constraint)
        self.requests = 0
        self._count_lock = threading.Lock()  # beam expansions count from several threads

    @property
    def where(self) -> str:
        """The server that sent the last reply (a pool's affinity or fail-over picks it), for errors."""
        return getattr(self.t, "server", None) or self._where

    def trie_keys(self) -> int:
        """How many keys the trie holds (`TrieView.count` of the root)."""
        return self.trie.count(self.trie.ROOT)

    def counted(self) -> None:
        with self._count_lock:
            self.requests += 1

    # ------------------------------------------------------------------ greedy, key by key
    def greedy(self, prompt_ids: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0,
               seed: int = 0) -> Generation:
        ids: list[int] = []
        lps: list[float] | None = []
        walk, end_lp, cut = RowState(self.trie.ROOT), None, False
        # A request that does not stop inside a key adds at least one key or ends the list, so a list of
        # distinct keys takes at most one request per key of the trie plus one; any list at most one per
        # token (an empty continuation is refused): no reply can make this loop spin.
        for _ in range(self.trie_keys() + 1 if self.c.distinct else max_new_tokens + 1):
            if walk.node == self.trie.ROOT and self.rule.allowed(walk) == [self.c.end_id]:
                break  # every key is in the list: EOS, which the ids do not carry
            room = max_new_tokens - len(ids)
            if room <= 0:
                cut = True
                break
            grammar = key_grammar(self.rule, walk)
            reply = self.t.continue_(list(prompt_ids) + ids, grammar, max_tokens=min(room, self.trie.max_depth),
                                     temperature=temperature, seed=seed)
            self.counted()
            if not reply.token_ids:
                raise BadServerReply(f"{self.where}: continuation: field token_ids: []: an empty continuation "
                                     "under a grammar that allows no empty key")
            ended, n = self._accept(walk, reply)
            walk = ended
            body = reply.token_ids[:n]
            raw = reply.raw_logprobs[:n] if reply.raw_logprobs is not None else None
            if body and body[-1] == self.c.end_id:
                ids += body[:-1]
                lps = None if lps is None or raw is None else lps + raw[:-1]
                end_lp = None if raw is None else raw[-1]
                break
            ids += body
            lps = None if lps is None or raw is None else lps + raw
            if walk.node != self.trie.ROOT:  # stopped inside a key: the engine hit max_tokens
                cut = True
                break
        else:
            raise BadServerReply(f"{self.where}: continuation: {len(ids)} tokens in more requests than the trie has "
                                 f"keys ({self.trie_keys()}): the replies add no key")
        if lps is None and not cut:  # the engine's generation log-probs are not raw: score the sequence
            scored = self.t.score(prompt_ids, ids + [self.c.end_id])
            self.counted()
            lps, end_lp = scored[:-1], scored[-1]
        if cut:
            lps, end_lp = None, None  # as the local backend: a list cut by max_new_tokens is not tracked
        total = sum(lps) + (end_lp or 0.0) if lps is not None else 0.0
        return Generation(text="", token_ids=ids, logprob=total, n_prompt_tokens=len(prompt_ids), cut=cut,
                          token_logprobs=lps, end_logprob=end_lp)

    def _accept(self, walk: RowState, reply: Continuation) -> tuple[RowState, int]:
        """Walk the reply's tokens; stop after the key's separator or the end id. A token the
        rule does not allow is a bad reply."""
        for n, token in enumerate(reply.token_ids):
            if token not in self.rule.allowed(walk):
                raise BadServerReply(f"{self.where}: continuation: field token_ids: {token!r}: outside the schema "
                                     "grammar the request carried")
            walk = self.rule.step(walk, token)
            if walk.node == DONE or (walk.node == self.trie.ROOT and token == self.c.terminator):
                return walk, n + 1
        return walk, len(reply.token_ids)
