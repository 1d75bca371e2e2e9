"""Prepare the embedded model once: `python -m scgmem.llm.local.prepare` (run by `make install`).

De-quantises the bundled SmolLM2 GGUF into the float cache so the first run is fast.

`python -m scgmem.llm.local.prepare --export-hf DIR` also writes it as an ordinary Hugging Face model
folder (config.json, model.safetensors, generation_config.json, tokenizer files with the chat
template). `model=local model.path=DIR` then loads it exactly as a hub model is loaded
(`device: auto`, the same template handling), which tests the paper models' code path on a
machine without their weights.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path

from scgmem.llm.loading import EMBEDDED, resolve_model_dir
HF_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def export_hf(source: Path, out_dir: Path) -> Path:
    """Copy the de-quantised model as a plain HF folder and check that transformers loads it."""
    from transformers import AutoConfig, AutoTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    for name in HF_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out_dir / name)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{out_dir}: the exported tokenizer has no chat template")
    AutoConfig.from_pretrained(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export-hf", metavar="DIR", help="also write the model as a plain Hugging Face folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    start = time.time()
    folder = Path(resolve_model_dir(None, **EMBEDDED))
    print(f"embedded model ready in {folder} ({time.time() - start:.1f} s)")
    if args.export_hf:
        out = export_hf(folder, Path(args.export_hf))
        print(f"exported as a Hugging Face model folder: {out} (use: model=local model.path={out})")


if __name__ == "__main__":
    main()
