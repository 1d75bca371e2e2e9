"""A-MEM (docs/methods.md, section A-MEM): the method and its prompts/parsers."""
from scgmem.baselines.amem.method import AMem

__all__ = ["AMem"]
