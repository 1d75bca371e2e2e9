"""The baselines SCG-Mem is compared with (docs/methods.md): each behind the same MemoryMethod
interface (scgmem/api), one subpackage per multi-file family. Like scgmem/core they stand on
scgmem.api and scgmem.llm only (tests/test_import_boundaries.py)."""
