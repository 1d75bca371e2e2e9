"""ReadAgent (docs/methods.md, section ReadAgent): the method, its pagination and prompts."""
from scgmem.baselines.readagent.method import ReadAgent

__all__ = ["ReadAgent"]
