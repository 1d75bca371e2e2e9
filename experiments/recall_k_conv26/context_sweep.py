"""Context length against k (and turns_per_concept) without answering: recall only.

For each scored question of a conversation, SCG-Mem's recall (constrained beam search, then
propagation and reconstruction, with the run's per-question random stream and the runner's
token budget) is run from a cached memory for every setting given; the context handed to the
answer prompt is counted in tokens and turns, exactly as the runner records them
(`context_tokens`, `context_turns` in predictions.jsonl). No answer is generated, so a sweep
costs one beam search per question and setting. The full-context transcript of the slice
(every turn, chronological with DATE headers) is counted for scale.

    .venv/bin/python -m experiments.recall_k_conv26.context_sweep <memory cache entry .json> \
        "data.samples=[conv-26]" [data.max_sessions=4] -- k=5,tpc=1 k=35,tpc=1 k=35,tpc=all ...
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from scgmem.data.locomo import load_locomo, scored_questions, select
from scgmem.llm.chat_template import ChatPolicy
from scgmem.api import render_turns_by_date
from scgmem.harness.pipeline import PROMPT, RECALL, rng_for
from scgmem.harness.run import CONFIG_DIR, split_protocol


def main(entry_path: str, overrides: list[str], settings: list[str]) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose("config", overrides=["method=scgmem", *overrides])
    protocol_node, chat = split_protocol(cfg)
    names = {int(k): str(v) for k, v in cfg.data.categories.items()}
    categories = {int(c): names[int(c)] for c in cfg.data.scored_categories}
    protocol = instantiate(protocol_node, categories=categories)
    llm = instantiate(cfg.model)
    llm.set_chat_policy(ChatPolicy(**chat))
    conversations, _ = load_locomo(cfg.data.path)
    (conv,) = select(conversations, cfg.data.samples, cfg.data.max_sessions, source=str(cfg.data.path))
    questions = scored_questions(conv, categories, cfg.data.questions_per_category)
    entry = json.loads(Path(entry_path).read_text())
    full = llm.count_tokens(render_turns_by_date(list(conv.turns)))
    print(f"{conv.sample_id}: {len(conv.turns)} turns, full-context transcript {full} tokens; "
          f"{len(questions)} scored questions; memory {entry_path}")
    print("| setting | questions | mean context tokens | mean context turns | min-max tokens | "
          "share of the full transcript |")
    print("|---|---|---|---|---|---|")
    empty = [protocol.build_prompt(q, "", rng_for(cfg.seed, q.sample_id, q.index, PROMPT)) for q in questions]
    budgets = [llm.context_window - llm.count_tokens(llm.render(p.messages)) - p.max_new_tokens
               - cfg.run.answer_margin_tokens for p in empty]
    for setting in settings:
        values = dict(kv.split("=") for kv in setting.split(","))
        tpc = values.get("tpc", "1")
        method = instantiate(cfg.method, llm=llm, embedder=None, k=int(values.get("k", cfg.method.k)),
                             hops=int(values.get("hops", cfg.method.hops)),
                             turns_per_concept="all" if tpc == "all" else int(tpc))
        method.load_state_dict(entry["state"])
        start = time.perf_counter()
        recalls = []
        for i in range(0, len(questions), cfg.run.answer_batch_size):
            chunk = questions[i:i + cfg.run.answer_batch_size]
            recalls += method.recall_batch([q.question for q in chunk],
                                           budget_tokens=budgets[i:i + len(chunk)],
                                           rngs=[rng_for(cfg.seed, q.sample_id, q.index, RECALL) for q in chunk])
        tokens = np.array([llm.count_tokens(r.context) if r.context else 0 for r in recalls])
        turns = np.array([len(r.dia_ids) for r in recalls])
        print(f"| {setting} | {len(recalls)} | {tokens.mean():.1f} | {turns.mean():.2f} | {tokens.min()}-{tokens.max()} "
              f"| {tokens.mean() / full:.1%} |  <!-- {time.perf_counter() - start:.0f} s -->", flush=True)


if __name__ == "__main__":
    split = sys.argv.index("--")
    main(sys.argv[1], sys.argv[2:split], sys.argv[split + 1:])
