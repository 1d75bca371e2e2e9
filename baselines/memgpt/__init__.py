"""MemGPT (docs/methods.md, section MemGPT): the agent loop, its context, functions and prompts."""
from scgmem.baselines.memgpt.method import MemGPT

__all__ = ["MemGPT"]
