"""A tiny random Llama with a locally trained tokenizer, saved to a folder.

It stands in for a hub model (hubs are unreachable here): `LLM(path=folder)` goes
through exactly the code path `LLM(path="Qwen/Qwen2.5-3B-Instruct")` takes.
"""
from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired.",
    "Melanie painted a sunrise by the lake; she loves hiking, camping and pottery.",
    "What did Caroline research? Adoption agencies. When did Melanie run a charity race?",
    "coffee shop, hiking trip, career counseling, mental health, art class, beach, kids",
    "The quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9 , . ! ? : ; ' \" ( ) [ ] { } < > -",
]


def build_tiny_model(folder: Path, vocab_size: int = 300, seed: int = 0) -> Path:
    """Write a 2-layer Llama (hidden 32) and a byte-level BPE tokenizer with a chat template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return folder
