"""A serving engine added as one file, as docs/architecture.md ("Add a serving engine") says:
the contract test puts this folder beside scgmem/llm/served/engines/ and `model.engine=echo` finds it.

Its engine is imaginary: POST /echo/continue and /echo/next with token-id prompts, replies
{"ids", "logprobs", "finish"} and {"logprobs": {"<id>": lp}}. It cannot score a given
continuation, so it leaves that question to the base (`Unsupported`).
"""
from __future__ import annotations

from scgmem.llm.served.engines.dialect import BadReply, Continuation, EngineDialect, NextTokens, number, token_id
from scgmem.llm.served.engines import register_engine


@register_engine
class EchoDialect(EngineDialect):
    name = "echo"
    route = "generation log-probs (raw); next token: the allowed ids"

    def build_continue(self, prompt_ids, grammar, *, max_tokens, temperature, seed):
        return "/echo/continue", {"ids": prompt_ids, "grammar": grammar, "max_tokens": max_tokens,
                                  "temperature": temperature, "seed": seed}

    def parse_continue(self, reply):
        ids = self.listed(self.required(reply, "ids", "reply"), "ids")
        lps = self.listed(self.required(reply, "logprobs", "reply"), "logprobs")
        ids = [token_id(t, f"echo: ids[{i}]") for i, t in enumerate(ids)]
        lps = [number(x, f"echo: logprobs[{i}]") for i, x in enumerate(lps)]
        if len(lps) != len(ids) or reply.get("finish") not in ("stop", "length"):
            raise BadReply("echo: logprobs must match ids, finish must be stop or length")
        return Continuation(ids, lps, reply["finish"])

    def build_next(self, prompt_ids, allowed, top_n):
        return "/echo/next", {"ids": prompt_ids, "allowed": allowed}

    def parse_next(self, reply, allowed):
        listed = self.required(reply, "logprobs", "reply")
        if not isinstance(listed, dict) or set(listed) != {str(t) for t in allowed}:
            raise BadReply("echo: logprobs must map every allowed id")
        return NextTokens({t: number(listed[str(t)], f"echo: logprobs[{t}]") for t in allowed}, complete=True)
