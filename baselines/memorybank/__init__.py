"""MemoryBank (docs/methods.md, section MemoryBank): the method, its forgetting curves, units and prompts."""
from scgmem.baselines.memorybank.method import MemoryBank

__all__ = ["MemoryBank"]
