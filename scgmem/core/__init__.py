"""SCG-Mem, the method of the paper's Section 3, one module per idea (docs/paper_map.md):

- `concepts`     3.1       concept strings: parsing, normalisation, validation
- `schema`       3.2       the cognitive schema S as a token-id trie (Eq. 4-5)
- `decoding`     3.3       constrained generation of key lists, read back with raw log-probs
                           (the key-list rule itself is `scgmem.llm.key_rule`; each backend compiles it:
                           the logits processor in `scgmem.llm.local`, the grammar in `scgmem.llm.served`)
- `beam_search`  3.3, 3.6  the b most probable keys of S (Eq. 11)
- `evolution`    3.4       assimilation (Eq. 7) and accommodation (Eq. 8-9)
- `graph`        3.5       the associative graph (Eq. 10)
- `recall`       3.6       activation, propagation (Eq. 12-13), context reconstruction
- `method`                 `SCGMem`, the harness interface (scgmem.api.MemoryMethod)

The core knows nothing about LoCoMo's file format or scoring; it sees turns and questions.
"""
