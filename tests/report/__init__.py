"""Fake run directories in the real format, for the report tests (no model is run).

`write_run` writes what `scgmem-run` writes: predictions.jsonl (the records given),
summary.json (built by the runner's own `scgmem.harness.summary.build_summary`, so its format follows
the runner), .hydra/config.yaml and .hydra/overrides.yaml.
"""
from __future__ import annotations

import json
from pathlib import Path
from fractions import Fraction
from types import SimpleNamespace

from omegaconf import OmegaConf

from scgmem.harness.pipeline import RunState
from scgmem.harness.summary import build_summary
from scgmem.scoring.metrics import bleu1 as bleu1_of
from scgmem.scoring.metrics import f1_amem

CATEGORIES = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}


def answer_pair(f1: float, bleu1: float | None = None) -> tuple[str, str]:
    """(reference, prediction) whose A-MEM F1 is `f1` and BLEU-1 `bleu1` (default: `f1`), so a report
    reading the record through the resume's checks recomputes both: a reference of n distinct words,
    a prediction sharing m of them (set F1 m / n) and holding d extra copies of a shared word, which
    the set F1 ignores and BLEU-1's clipped precision counts (m / (n + d); no brevity penalty)."""
    bleu1 = f1 if bleu1 is None else bleu1
    ratio = Fraction(f1).limit_denominator(64)
    for k in range(1, 65):
        n, m = ratio.denominator * k, ratio.numerator * k
        extra = m / bleu1 - n if bleu1 else 0
        if 0 <= m <= n and (m > 0 or bleu1 == 0) and abs(extra - round(extra)) < 1e-9 and extra >= 0:
            words = [f"w{i}" for i in range(m)] + [f"x{i}" for i in range(n - m)] + ["w0"] * round(extra)
            return " ".join(f"w{i}" for i in range(n)), " ".join(words)
    raise ValueError(f"no answer pair gives F1 {f1} and BLEU-1 {bleu1}")


def rec(sample_id: str, qa_index: int, category: int, f1: float, bleu1: float | None = None) -> dict:
    """One prediction record with the contract's fields whose scores (F1, and BLEU-1, default F1)
    recompute from its prediction (`answer_pair`)."""
    reference, prediction = answer_pair(f1, bleu1)
    return {"sample_id": sample_id, "qa_index": qa_index, "category": category, "question": f"q{qa_index}?",
            "reference": reference, "prediction": prediction, "f1": f1_amem(prediction, reference),
            "bleu1": bleu1_of(prediction, reference), "evidence": ["D1:1"], "retrieved": ["D1:1", "D1:2"],
            "evidence_recall": 1.0, "latency_s": 0.5, "prompt_tokens": 100}


def rescored(r: dict) -> dict:
    """`r` with its scores recomputed from its (edited) prediction and reference."""
    return {**r, "f1": f1_amem(r["prediction"], r["reference"]), "bleu1": bleu1_of(r["prediction"], r["reference"])}


def data_record(data_path: Path, sample_id: str, qa_index: int, prediction: str, retrieved: list[str],
                protocol, seed: int = 0) -> dict:
    """The record `scgmem-run` writes for question `qa_index` of `sample_id` in the data file (its
    gold under `protocol`, the options this seed shows, every score recomputed), answered `prediction`."""
    from scgmem.data.locomo import load_locomo
    from scgmem.harness.pipeline import PROMPT, rng_for
    from scgmem.scoring.metrics import evidence_recall

    conversations, _ = load_locomo(data_path)
    q = next(c for c in conversations if c.sample_id == sample_id).qa[qa_index]
    options = protocol.build_prompt(q, "", rng_for(seed, sample_id, qa_index, PROMPT)).options
    return {"sample_id": sample_id, "qa_index": qa_index, "category": q.category, "question": q.question,
            "reference": protocol.reference(q), "prediction": prediction,
            **protocol.score(q, prediction, options=options), "evidence": list(q.evidence), "retrieved": retrieved,
            "evidence_recall": evidence_recall(q.evidence, retrieved), "latency_s": 0.5, "prompt_tokens": 100,
            **({"options": options} if options else {})}


def write_run(run_dir: Path, *, model: str, method: str, records: list[dict], method_cfg: dict | None = None,
              overrides: list[str] | None = None, tokens: dict | None = None, timing: tuple[float, float] = (0.0, 0.0),
              samples: list[str] | None = None, questions_per_category: int | None = 2,
              ingested_turns: dict[str, int] | None = None, categories: dict[int, str] | None = None) -> Path:
    run_dir = Path(run_dir)
    samples = samples or sorted({r["sample_id"] for r in records}) or None  # the slice the records answer
    turns = ingested_turns if ingested_turns is not None else {s: 100 for s in samples or ["conv-1"]}
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    config = {"model": {"name": model}, "method": {"_target_": f"fake.{method}", **(method_cfg or {})},
              "data": {"samples": samples or ["conv-1"], "questions_per_category": questions_per_category},
              "protocol": {"_target_": "scgmem.scoring.protocols.AmemProtocol"}, "seed": 0}
    usage = dict(tokens or {"answer": {"calls": len(records), "prompt_tokens": 100 * len(records),
                                       "generated_tokens": 10 * len(records)}})
    # As the runner: ingest usage comes from the memory (built or cached), the rest from the LLM meter.
    state = RunState(ingest_s=timing[0], answer_s=timing[1], ingest_usage={"ingest": usage.pop("ingest", {})})
    protocol = SimpleNamespace(name="amem", settings=lambda: {"protocol": "amem"})
    summary = build_summary(
        records=records, state=state, method_name=method, model_name=model, protocol=protocol,
        categories=categories or CATEGORIES, seed=0,
        data_info={"path": "data/locomo10.json", "samples": samples or ["conv-1"], "max_sessions": None,
                   "questions_per_category": questions_per_category, "load_report": {},
                   "ingested_turns": turns, "ingested_turns_total": sum(turns.values())},
        llm_usage=usage,
        config=config)
    (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (run_dir / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    OmegaConf.save(OmegaConf.create(config), run_dir / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides or [f"model={model}", f"method={method}"]),
                   run_dir / ".hydra" / "overrides.yaml")
    return run_dir
