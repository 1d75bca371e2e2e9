"""Retrieval baselines: a generic dense RAG (and the last-k-turns smoke method) and LoCoMo's own RAG."""
from scgmem.baselines.rag.dense import DenseRAG, LastTurns
from scgmem.baselines.rag.locomo import LoCoMoRAG

__all__ = ["DenseRAG", "LastTurns", "LoCoMoRAG"]
