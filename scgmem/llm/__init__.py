"""LLM backend: one class that loads a causal LM (hub id, local folder or bundled GGUF) and generates."""
from scgmem.llm.backend import LLM, Generation
from scgmem.llm.usage import UsageMeter

__all__ = ["LLM", "Generation", "UsageMeter"]
