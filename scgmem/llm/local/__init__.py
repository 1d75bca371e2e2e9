"""The local transformers backend: `LLM` (backend) and what it is made of - loading and the
embedded GGUF (loading, prepare), decoding settings (generation), attention kernels (attention,
gqa_attention), batching and the prefix cache (batch_plan, prefix_cache), the static KV cache and
torch.compile (static_decode), the float32 score head, the out-of-memory split (oom), sampling and
log-prob recording (sampling), the memo (memo), and a `KeyConstraint` compiled into the schema trie's
logits processor (constraint)."""
