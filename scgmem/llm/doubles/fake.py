"""A scripted stand-in for `LLM`, so that parsers and fallbacks are testable without a model.

It implements `scgmem.llm.protocol.LanguageModel` and the rest of the surface the harness
uses (usage, chat policy, generation report). Tokens are whitespace-separated words, each
word's id a hash below `WORD_IDS`; it applies no constraint, so SCG-Mem's constrained
decoding cannot run on it.

Example::

    llm = ScriptedLLM(["Break point: <3>", "not a number"])     # replies in turn, cycling
    llm = ScriptedLLM(lambda prompt: "KEYWORDS: a, b")         # or computed from the prompt
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from scgmem.llm.protocol import Generation
from scgmem.llm.usage import UsageMeter

WORD_IDS = 50000  # word ids are hashes below this; the pad and EOS ids follow


class ScriptedLLM:
    def __init__(self, script: Sequence[str] | Callable[[str], str], context_window: int = 8192,
                 name: str = "scripted") -> None:
        self.script = script
        self.context_window = context_window
        self.name = name
        self.source = "scripted"
        self.usage = UsageMeter()
        self.prompts: list[str] = []  # every prompt received, for assertions
        self._turn = 0
        self.chat = None
        self.prompt_fingerprint = "scripted"
        self._words: dict[int, str] = {}  # id -> a word encoded to it, for decode

    # the LanguageModel facts of a vocabulary of hashed words
    vocab_size = WORD_IDS + 2
    pad_id = WORD_IDS
    eos_id = WORD_IDS + 1
    dtype = "none"  # no weights
    applies_constraints = False

    def set_chat_policy(self, policy) -> None:
        self.chat = policy

    def generation_report(self) -> dict:
        return {"calls": {}, "neutralised_model_defaults": {}, "chat_template": None}

    @property
    def eos_ids(self) -> list[int]:
        return [self.eos_id]

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            ids.append(hash(word) % WORD_IDS)
            self._words[ids[-1]] = word
        return ids

    def decode(self, ids) -> str:
        return " ".join(self._words.get(i, f"<{i}>") for i in ids)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def render(self, messages, *, add_generation_prompt: bool = True, assistant_prefix: str = "") -> str:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        text = "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages)
        return text + ("<assistant>\n" if add_generation_prompt else "") + assistant_prefix

    def _reply(self, prompt: str) -> str:
        if callable(self.script):
            return self.script(prompt)
        reply = self.script[self._turn % len(self.script)]
        self._turn += 1
        return reply

    def generate(self, prompts, *, max_new_tokens: int = 64, temperature: float = 0.0, seeds=None,
                 constraint=None, num_beams: int = 1, num_return_sequences: int = 1,
                 length_penalty: float = 0.0, stop=()) -> list[list[Generation]]:
        out = []
        for p in prompts:
            self.prompts.append(p)
            text = " ".join(self._reply(p).split(" ")[:max_new_tokens]) if max_new_tokens else ""
            for s in stop:
                if s and s in text:
                    text = text[: text.index(s)]
            self.usage.add(self.count_tokens(p), self.count_tokens(text))
            out.append([Generation(text=text.strip(), token_ids=self.encode(text), logprob=0.0,
                                   n_prompt_tokens=self.count_tokens(p))] * num_return_sequences)
        return out


class HybridLLM:
    """A real `LLM` for constrained calls (they need its tokenizer and logits), scripted replies
    for free generation (no constraint): SCG-Mem's whole pipeline at scripted speed."""

    def __init__(self, llm, script: Callable[[str], str]) -> None:
        self._llm = llm
        self.script = script
        self.free_prompts: list[str] = []

    def __getattr__(self, name):
        return getattr(self._llm, name)

    def generate(self, prompts, **kwargs):
        if kwargs.get("constraint") is not None or kwargs.get("processors") is not None:
            return self._llm.generate(prompts, **kwargs)
        self.free_prompts.extend(prompts)
        return [[Generation(text=self.script(p))] for p in prompts]


def echo_reply(prompt: str) -> str:
    """A fake answer that depends on the prompt alone (batching cannot change it) and parses as
    something for each method's format."""
    tail = " ".join(prompt.split()[-4:])
    return f"KEYWORDS: {tail}\nCONTEXT: {tail}\nTAGS: {tail}\nDECISION: NO_EVOLUTION\nBreak point: <2>\n{tail}"


class BagEmbedder:
    """Hashed bag of words, unit length: similar wording -> high cosine. Deterministic, no model."""

    name = "bag"

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0

    def encode(self, texts):
        self.calls += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)  # (n, dim)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, sum(map(ord, word)) % self.dim] += 1.0
            out[row, 0] += 1e-3  # no all-zero row: every text has a direction
        return out / np.linalg.norm(out, axis=1, keepdims=True)
