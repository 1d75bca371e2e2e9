"""The language models every method stands on, in four parts:

- the interface: `protocol` (`LanguageModel`, `Generation`) and `constraint_spec` (`KeyConstraint`:
  what a constrained call may generate, as data), with what every backend shares (`chat_template`,
  `usage`, `scheduler`: batching across conversations) and the embedder (`embedder`);
- `local/`: the transformers backend (`LLM`) and its speed levers; a constraint becomes the schema
  trie's logits processor;
- `served/`: any OpenAI-compatible server (`OpenAICompatibleLLM`), and for SCG-Mem the engine
  dialects (vLLM, SGLang, llama.cpp), the llguidance grammar compiler and the client-side decoding;
- `doubles/`: the scripted model, tiny models and real tokenizers the tests run on.
"""
from scgmem.llm.local.backend import LLM, Generation
from scgmem.llm.usage import UsageMeter

__all__ = ["LLM", "Generation", "UsageMeter"]
