"""SGLang's dialect: the native /generate endpoint with token-id input, llguidance grammars, raw
log-probs by scoring.

Not run here (no GPU on this machine): the fields come from SGLang's docs
(docs/basic_usage/sampling_params.md: `input_ids`, `return_logprob`, `logprob_start_len`,
`top_logprobs_num`, `token_ids_logprob`, the `ebnf` sampling parameter) and sources, named next
to their use; the tests check the bodies and reply fixtures copied in shape from them.

* **Constraint.** `sampling_params.ebnf`. With `--grammar-backend llguidance` SGLang compiles it
  with `llguidance.grammar_from("ebnf", ...)` (srt/constrained/llguidance_backend.py), which keeps
  a text that starts with `%llguidance` or has a `start:` rule as Lark (llguidance's
  gbnf_to_lark.any_to_lark; checked here with the installed llguidance), so token-id terminals
  `<[id]>` reach llguidance unchanged. SGLang's default backend (xgrammar) would read it as GBNF.
* **Why scoring afterwards.** The grammar's vocab mask is applied to the logits before the
  sampler's log_softmax, so the returned `output_token_logprobs` are renormalised over the
  allowed tokens. The raw ones come from `input_token_logprobs` on prompt + continuation.
* **Reply shapes** (srt/managers/tokenizer_manager.py `detokenize_logprob_tokens`): the reply is
  {"text", "output_ids", "meta_info"}; each log-prob entry is [logprob, token_id, text-or-null].
  `input_token_logprobs` is aligned with `input_ids[logprob_start_len:]` and its entry 0 is
  always null (scheduler `_process_input_token_logprobs`: `[None] + logprobs[:-1]`), so scoring
  starts one token before the continuation. `output_token_ids_logprobs` holds, per generated
  position, the entries for the ids in `token_ids_logprob`.
* **Greedy is raw.** temperature 0 becomes top_k=1 with temperature 1 (SamplingParams
  `__post_init__`), and the greedy path's log-probs are a log_softmax of the logits, so the
  next-token and scoring requests (both greedy, no grammar) return raw log-probs.
"""
from __future__ import annotations

from scgmem.llm.served.engines.dialect import (BadReply, Continuation, EngineDialect, NextTokens, Unsupported, number, token_id,
                                      top_list)
from scgmem.llm.served.engines import register_engine

PATH = "/generate"
FINISH = ("stop", "length")  # meta_info.finish_reason.type; "abort" is an error

# SGLang takes sampling defaults from generation_config.json (`--sampling-defaults model`, its
# default): these are sent on every request so that what the harness records is what ran.
# top_k=-1 is "off" (0 is refused by SamplingParams.verify).
NEUTRAL = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
           "presence_penalty": 0.0, "frequency_penalty": 0.0}


@register_engine
class SGLangDialect(EngineDialect):
    """SGLang's native /generate with token-id input.

    Args:
        model_id: the served model (recorded; /generate serves the one model the server loaded).
    """

    name = "sglang"
    route = "input_token_logprobs after generation; next token: token_ids_logprob"
    max_top_n = None  # token_ids_logprob names the ids; no top-n list is needed

    # -- continue under a grammar ---------------------------------------------------------------

    def build_continue(self, prompt_ids: list[int], grammar: str, *, max_tokens: int, temperature: float,
                       seed: int) -> tuple[str, dict]:
        """Continue under `ebnf`; `return_logprob` carries the ids in `output_token_logprobs` too.
        `sampling_seed` is sent only when sampling (a greedy request has nothing to seed)."""
        params = self._params(max_tokens=max_tokens, temperature=temperature)
        params["ebnf"] = grammar
        if temperature > 0:
            params["sampling_seed"] = seed
        return PATH, {"input_ids": prompt_ids, "sampling_params": params,
                      "return_logprob": True, "logprob_start_len": -1, "stream": False}

    def parse_continue(self, reply: dict) -> Continuation:
        """The generated ids (`output_ids`, checked against `output_token_logprobs`) and finish
        reason; log-probs None (renormalised by the grammar mask)."""
        meta = self._meta(reply)
        finish = self.required(meta, "finish_reason", "meta_info")
        kind = finish.get("type") if isinstance(finish, dict) else None
        if kind not in FINISH:
            raise BadReply(f"sglang: meta_info.finish_reason is {finish!r:.80}, expected type in {FINISH}")
        from_logprobs = None
        if "output_token_logprobs" in meta:
            entries = self.listed(meta["output_token_logprobs"], "meta_info.output_token_logprobs")
            from_logprobs = [_entry(e, f"meta_info.output_token_logprobs[{i}]", allow_null=True)[1]
                             for i, e in enumerate(entries)]
        ids = reply.get("output_ids")
        if ids is not None:
            ids = [token_id(t, f"sglang: output_ids[{i}]") for i, t in enumerate(self.listed(ids, "output_ids"))]
        ids = self.agreed_ids(ids, from_logprobs, "output_ids", "meta_info.output_token_logprobs")
        return Continuation(token_ids=ids, raw_logprobs=None, finish=kind)

    # -- raw log-probs at the next position -----------------------------------------------------

    def build_next(self, prompt_ids: list[int], allowed: list[int], top_n: int) -> tuple[str, dict]:
        """One greedy token, with the log-probs of exactly the allowed ids (`token_ids_logprob`);
        `top_n` is not needed and ignored. `logprob_start_len: -1` asks for no prompt log-probs."""
        return PATH, {"input_ids": prompt_ids,
                      "sampling_params": self._params(max_tokens=1, temperature=0.0),
                      "return_logprob": True, "logprob_start_len": -1, "token_ids_logprob": sorted(set(allowed)),
                      "stream": False}

    def parse_next(self, reply: dict, allowed: list[int]) -> NextTokens:
        """`meta_info.output_token_ids_logprobs[0]`: [logprob, id, text] per requested id."""
        meta = self._meta(reply)
        if "output_token_ids_logprobs" not in meta:
            raise Unsupported("sglang: the reply has no meta_info.output_token_ids_logprobs; the server "
                              "predates token_ids_logprob (needs an SGLang with that /generate parameter)")
        per_pos = self.listed(meta["output_token_ids_logprobs"], "meta_info.output_token_ids_logprobs")
        if len(per_pos) != 1:
            raise BadReply(f"sglang: meta_info.output_token_ids_logprobs has {len(per_pos)} positions, expected 1")
        entries = self.listed(per_pos[0], "meta_info.output_token_ids_logprobs[0]")
        pairs = []
        for i, e in enumerate(entries):
            lp, tok = _entry(e, f"meta_info.output_token_ids_logprobs[0][{i}]")
            pairs.append((tok, lp))
        listed = top_list(pairs, "meta_info.output_token_ids_logprobs[0]", ranked=False)  # in the order asked
        wanted = set(allowed)
        got = {t: lp for t, lp in listed.items() if t in wanted}
        if len(got) != len(wanted):
            missing = sorted(wanted - set(got))[:5]
            raise BadReply(f"sglang: meta_info.output_token_ids_logprobs[0] lacks requested ids {missing}")
        return NextTokens(logprobs=got, complete=True, floor=min(listed.values()), listed=tuple(listed))

    # -- raw log-probs of a given continuation --------------------------------------------------

    def build_score(self, prompt_ids: list[int], continuation: list[int]) -> tuple[str, dict]:
        """Teacher forcing: prompt + continuation as input, log-probs from the last prompt token on
        (`logprob_start_len = len(prompt) - 1`, since entry 0 is always null). SGLang's radix cache
        still serves the prompt up to `logprob_start_len`."""
        return PATH, {"input_ids": prompt_ids + continuation,
                      "sampling_params": self._params(max_tokens=1, temperature=0.0),
                      "return_logprob": True, "logprob_start_len": len(prompt_ids) - 1, "stream": False}

    def parse_score(self, reply: dict, prompt_len: int, continuation: list[int]) -> list[float]:
        """`meta_info.input_token_logprobs[1 + j][0]` for each continuation token j; the entries'
        token ids must be the last prompt token and then the continuation."""
        entries = self.listed(self.required(self._meta(reply), "input_token_logprobs", "meta_info"),
                              "meta_info.input_token_logprobs")
        if len(entries) != len(continuation) + 1:
            raise BadReply(f"sglang: meta_info.input_token_logprobs has {len(entries)} entries, expected "
                           f"{len(continuation) + 1} (logprob_start_len = prompt {prompt_len} - 1)")
        out = []
        for j, e in enumerate(entries):
            lp, tok = _entry(e, f"meta_info.input_token_logprobs[{j}]", allow_null=(j == 0))
            if j and tok != continuation[j - 1]:
                raise BadReply(f"sglang: meta_info.input_token_logprobs[{j}] is token {tok}, "
                               f"expected {continuation[j - 1]}")
            if j:
                out.append(lp)
        return out

    @staticmethod
    def _params(*, max_tokens: int, temperature: float) -> dict:
        """Sampling parameters every request carries: length, temperature, the neutral settings,
        and special tokens kept (a key may end in EOS)."""
        return {"max_new_tokens": max_tokens, "temperature": temperature, "n": 1, **NEUTRAL,
                "skip_special_tokens": False}

    def _meta(self, reply: dict) -> dict:
        meta = self.required(reply, "meta_info", "reply")
        if not isinstance(meta, dict):
            raise BadReply(f"sglang: meta_info is {type(meta).__name__}, expected an object")
        return meta


def _entry(value, where: str, allow_null: bool = False) -> tuple[float | None, int]:
    """One [logprob, token_id, text-or-null] entry; the log-prob may be null only where allowed."""
    if not isinstance(value, list) or len(value) != 3:
        raise BadReply(f"sglang: {where} is {value!r:.60}, expected [logprob, token_id, text]")
    lp, tok, text = value
    if text is not None and not isinstance(text, str):
        raise BadReply(f"sglang: {where}[2] is {type(text).__name__}, expected a string or null")
    tok = token_id(tok, f"sglang: {where}[1]")
    if lp is None and allow_null:
        return None, tok
    return number(lp, f"sglang: {where}[0]"), tok
