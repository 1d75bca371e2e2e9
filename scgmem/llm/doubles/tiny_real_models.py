"""Tiny random-weight models with the paper models' real vocabularies and chat templates
(issue 26, item 5): a 2-layer Llama with Llama 3.2's tokenizer, a 2-layer Qwen2 with Qwen2.5's,
saved as plain Hugging Face folders, so `model=local model.path=<folder>` runs a method through
the real special tokens (three EOS ids and no pad for Llama; 151,936 score columns for 151,665
tokens for Qwen) on CPU in seconds, and the device check can carry the same build to a GPU.

    folder = build_tiny_real_model("qwen2.5", Path("/tmp/tiny-qwen"))
"""
from __future__ import annotations

from pathlib import Path

from scgmem.llm.doubles.real_tokenizers import MODEL_FACTS, tokenizer_dir


def build_tiny_real_model(family: str, folder: Path, *, hidden: int = 64, layers: int = 2, seed: int = 0,
                          dtype: str = "float32") -> Path:
    """Write a random `family` model ("llama3.2" or "qwen2.5") of `layers` layers and width
    `hidden` with the real tokenizer, config ids and generation_config EOS ids into `folder`."""
    import torch
    from transformers import (AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)

    facts = MODEL_FACTS[family]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    AutoTokenizer.from_pretrained(tokenizer_dir(family)).save_pretrained(folder)
    common = dict(vocab_size=facts["vocab_size"], hidden_size=hidden, intermediate_size=2 * hidden,
                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=32768, rope_theta=facts["rope_theta"],
                  bos_token_id=facts["bos_token_id"], eos_token_id=facts["eos_token_id"],
                  pad_token_id=facts["pad_token_id"], tie_word_embeddings=facts["tie_word_embeddings"])
    torch.manual_seed(seed)
    if family == "llama3.2":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    model.generation_config = GenerationConfig(bos_token_id=facts["bos_token_id"], eos_token_id=facts["eos_token_id"],
                                               pad_token_id=facts["pad_token_id"])
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return folder


# The stand-ins of the paper models (`make standins`, configs/model/standin-*.yaml): the paper
# architectures (Qwen2, Llama) at 2 layers and width 256, random weights, the real tokenizers and
# chat templates. Width 256 with 4 heads gives head_dim 64: vLLM's CPU attention has no kernel for
# head_dim 16 (width 64), and 256 is what results/served/vllm_vocab.json ran.
STANDINS = {"standin-qwen2.5": "qwen2.5", "standin-llama3.2": "llama3.2"}
STANDIN_HIDDEN = 256


def standin_dir(name: str, root: Path | None = None) -> Path:
    """Where `make standins` writes the stand-in `name`: <repository>/.cache/standins/<name>."""
    if name not in STANDINS:
        raise ValueError(f"stand-in {name!r} is not one of {', '.join(STANDINS)}")
    return Path(root or Path(__file__).resolve().parents[3] / ".cache" / "standins") / name


def build_standins(root: Path | None = None, names=None) -> list[Path]:
    """Build each stand-in once (a folder with config.json is kept); returns their folders."""
    from scgmem.llm.loading import build_dir_once

    out = []
    for name in names or STANDINS:
        folder = standin_dir(name, root)
        build_dir_once(folder, lambda d, n=name: _build_standin(STANDINS[n], d), lambda d: (d / "standin.json").is_file())
        out.append(folder)
    return out


def _build_standin(family: str, folder: Path) -> None:
    import json

    build_tiny_real_model(family, folder, hidden=STANDIN_HIDDEN)
    (folder / "standin.json").write_text(json.dumps({"family": family, "hidden": STANDIN_HIDDEN, "layers": 2,
                                                     "seed": 0}) + "\n")  # written last: the build is whole


def main() -> None:
    """`python -m scgmem.llm.doubles.tiny_real_models [--root DIR]`: the stand-ins (make standins)."""
    import argparse

    parser = argparse.ArgumentParser(description="build the paper models' stand-ins into .cache/standins")
    parser.add_argument("--root", default=None, help="folder of the stand-ins (default: .cache/standins)")
    args = parser.parse_args()
    for folder in build_standins(Path(args.root) if args.root else None):
        print(f"stand-in ready: {folder}")


if __name__ == "__main__":
    main()
