"""How much of a conversation MemoryBank still holds at QA time, per forgetting curve.

No LLM is involved: forgetting and the simulated recalls need only the dates and the
embeddings. The session summaries are left out (an LLM writes them), so every unit is a turn
pair; with summaries the simulated recalls would also hit summary units.
`python -m experiments.memorybank_survival` prints the table for a LoCoMo sample.
"""
from __future__ import annotations

import numpy as np

from scgmem.baselines.memorybank.method import MemoryBank
from scgmem.llm.doubles.fake import ScriptedLLM


class MemoEmbedder:
    """Encodes each distinct text once across the runs (the units are the same for every seed)."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.name = embedder.name
        self.vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if new:
            self.vectors.update(zip(new, self.embedder.encode(new)))
        return np.stack([self.vectors[t] for t in texts]) if texts else np.zeros((0, 1), dtype=np.float32)


def survival(conversation, embedder, curve: str, simulate_recall: bool, seeds: int) -> dict[str, float]:
    rows = []
    for seed in range(seeds):
        bank = MemoryBank(ScriptedLLM([""]), embedder, forgetting_curve=curve, simulate_recall=simulate_recall)
        bank.ingest(conversation, np.random.default_rng(seed))
        stats = bank.stats()
        rows.append((stats["sessions_alive"], stats["sessions_alive_equivalent"], stats["units_alive"]))
    sessions, equivalent, units = np.mean(rows, axis=0)
    return {"sessions_alive": float(sessions), "sessions_alive_equivalent": float(equivalent),
            "units_alive": float(units), "units": len(bank.units), "sessions": len(bank.sessions)}
