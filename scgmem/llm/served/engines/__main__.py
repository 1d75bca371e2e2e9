"""`python -m scgmem.llm.served.engines`: the names model.engine takes, one a line."""
from scgmem.llm.served.engines import names

print("\n".join(names()))
