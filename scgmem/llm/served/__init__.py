"""SCG-Mem and the baselines on a serving engine (vLLM, SGLang, llama.cpp) over HTTP.

The local transformers backend applies a schema constraint as a logits processor; a server
cannot run our Python, so here a `KeyConstraint` (scgmem.llm.constraint_spec) is compiled
into what the engine understands: an llguidance Lark grammar over token ids
(`lark_trie`), and requests in the engine's own dialect (`dialect`; one module per engine,
found by name in `engines`).
Recall's constrained beam search runs in the client (`keys`), one request per expansion.
"""
