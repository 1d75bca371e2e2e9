"""The language models every method stands on, in four parts:

- the interface and the neutral floor: `protocol` (`LanguageModel`, `Generation`) and
  `constraint_spec` (`KeyConstraint`: what a constrained call may generate, as data), with what
  every backend shares (`chat_template`, `usage`: counts and settings, `loading`: where model files
  come from, `scheduler`: batching across conversations) and the embedder (`embedder`);
- `local/`: the transformers backend (`LLM`) and its speed levers; a constraint becomes the schema
  trie's logits processor;
- `served/`: any OpenAI-compatible server (`OpenAICompatibleLLM`), and for SCG-Mem the engine
  dialects (registered by name in `served/engines.py`), the llguidance grammar compiler and the
  client-side decoding; it stands on the floor, never on `local/`;
- `doubles/`: the scripted model, tiny models, real tokenizers and an in-process engine for tests.

Importing this package loads nothing heavy: `LLM` (torch, transformers) is imported the first
time it is asked for, so `import scgmem.llm.served.engines.dialect` stays light.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from scgmem.llm.protocol import Generation
from scgmem.llm.usage import UsageMeter

if TYPE_CHECKING:
    from scgmem.llm.local.backend import LLM

__all__ = ["LLM", "Generation", "UsageMeter"]


def __getattr__(name: str):
    if name == "LLM":  # the transformers backend, loaded only when named
        from scgmem.llm.local.backend import LLM

        return LLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
