"""The free-text requests of the served backend: the body of one call (completions or chat, primed
prefixes, the ids an engine is sent) and the reading of its reply into a `Generation`.

`FreeTextCalls` is a part of `OpenAICompatibleLLM` (openai_compatible.py), kept in its own file so
that each stays short; it reads the model's settings (`api`, `engine`, `model_id`, `top_p`,
`logprobs`, `prefill`, `context_window`, `base_url`, `chat`, `_rendered`, `encode`) and counts into
its meter (`_meter`).
"""
from __future__ import annotations

import json
import re

from scgmem.llm.protocol import Generation
from scgmem.llm.served.http_client import ServerError, printable


class FreeTextCalls:
    @property
    def _endpoint(self) -> str:
        return "completions" if self.api == "completions" else "chat/completions"

    def _body(self, prompt: str, max_new_tokens: int, temperature: float, seed: int, stop) -> tuple[dict, str]:
        if self.api == "completions":  # the locally rendered text, primed prefix included: continued as locally
            # An engine is sent the local tokenizer's ids: exactly what the local backend feeds (a server
            # tokenising the text would add a second BOS to Llama 3's rendered prompt); any other server the text.
            if self.engine is not None:
                ids = self.encode(prompt)
                limit = self.context_window - int(max_new_tokens)
                prompt = ids[max(0, len(ids) - limit):]  # the end of an over-long prompt, as locally
            body = {"model": self.model_id, "prompt": prompt, "max_tokens": int(max_new_tokens),
                    "temperature": float(temperature), "top_p": self.top_p, "n": 1, "seed": int(seed)}
            if stop:
                body["stop"] = list(stop)
            if self.logprobs:
                body["logprobs"] = 1
            return body, ""
        messages, prefix = self._rendered.get(prompt) or (self.chat.with_system([{"role": "user", "content": prompt}]), "")
        body = {"model": self.model_id, "messages": list(messages), "max_tokens": int(max_new_tokens),
                "temperature": float(temperature), "top_p": self.top_p, "n": 1, "seed": int(seed)}
        if stop:
            body["stop"] = list(stop)
        if self.logprobs:
            body["logprobs"] = True
        if prefix and self.prefill:
            body["messages"] = [*messages, {"role": "assistant", "content": prefix}]
            body.update(continue_final_message=True, add_generation_prompt=False)
        return body, prefix

    def _count(self, usage: dict, key: str, server: str) -> int:
        """A token count of the reply's usage: an int in [0, 10 * context_window], else a one-line error."""
        value = usage.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10 * self.context_window:
            raise ServerError(f"{server}/{self._endpoint}: usage.{key}: {printable(repr(value), 40)} is not a "
                              f"token count in [0, {10 * self.context_window}]")
        return value

    def _generation(self, reply: dict, prefix: str, stop, server: str | None = None) -> Generation:
        """The reply of `server` (the pool member that sent it; errors name it) as a Generation."""
        server = server or self.base_url
        try:
            choice = reply["choices"][0]
            text = (choice["text"] if self.api == "completions" else choice["message"]["content"]) or ""
        except (KeyError, IndexError, TypeError):
            raise ServerError(f"{server}/{self._endpoint}: reply has no choices[0] text: "
                              f"{printable(json.dumps(reply))}") from None
        if not isinstance(text, str):
            raise ServerError(f"{server}/{self._endpoint}: choices[0] text: expected a string, "
                              f"got {type(text).__name__}")
        if reply.get("model"):
            self.served_models.add(printable(str(reply["model"]), 200))
        if prefix and not self.prefill:
            text = strip_echo(text, prefix)
        for s in stop:  # servers apply stop; cut again in case one returns it
            if s and s in text:
                text = text[: text.index(s)]
        usage = reply.get("usage") or {}
        if not isinstance(usage, dict):
            raise ServerError(f"{server}/{self._endpoint}: usage: expected an object, got {type(usage).__name__}")
        n_prompt, n_out = (self._count(usage, k, server) for k in ("prompt_tokens", "completion_tokens"))
        cut = choice.get("finish_reason") == "length"
        logprob = 0.0
        lp = choice.get("logprobs") or {}
        content = lp.get("content") or [{"logprob": x} for x in (lp.get("token_logprobs") or [])]
        if content:
            logprob = float(sum(t.get("logprob") or 0.0 for t in content))
        self._meter().add(prompt_tokens=n_prompt, generated_tokens=n_out, cut=int(cut))
        # The server returns text, not ids: token_ids holds one placeholder per generated token it
        # counted, so length checks (ReadAgent's gist cap) read the server's count.
        return Generation(text=text.strip(), token_ids=[0] * n_out, logprob=logprob, n_prompt_tokens=n_prompt, cut=cut)


def strip_echo(text: str, prefix: str) -> str:
    """`text` without a leading copy of `prefix` (whitespace may differ anywhere in it), so
    that `prefix + result` reads as the reply the model wrote; unchanged when it does not start so."""
    chars = [re.escape(c) for c in prefix if not c.isspace()]
    if not chars:
        return text
    match = re.match(r"\s*" + r"\s*".join(chars), text)
    return text[match.end():] if match else text
