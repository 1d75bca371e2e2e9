"""Fake run directories in the real format, for the report tests (no model is run).

`write_run` writes what `scgmem-run` writes: predictions.jsonl (the records given),
summary.json (built by the runner's own `scgmem.harness.summary.build_summary`, so its format follows
the runner), .hydra/config.yaml and .hydra/overrides.yaml.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from omegaconf import OmegaConf

from scgmem.harness.pipeline import RunState
from scgmem.harness.summary import build_summary

CATEGORIES = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}


def rec(sample_id: str, qa_index: int, category: int, f1: float, bleu1: float | None = None) -> dict:
    """One prediction record with the contract's fields (bleu1 defaults to f1)."""
    return {"sample_id": sample_id, "qa_index": qa_index, "category": category, "question": f"q{qa_index}?",
            "reference": "ref", "prediction": "pred", "f1": f1, "bleu1": f1 if bleu1 is None else bleu1,
            "evidence": ["D1:1"], "retrieved": ["D1:1", "D1:2"], "evidence_recall": 1.0, "latency_s": 0.5,
            "prompt_tokens": 100}


def write_run(run_dir: Path, *, model: str, method: str, records: list[dict], method_cfg: dict | None = None,
              overrides: list[str] | None = None, tokens: dict | None = None, timing: tuple[float, float] = (0.0, 0.0),
              samples: list[str] | None = None, questions_per_category: int | None = 2,
              ingested_turns: dict[str, int] | None = None) -> Path:
    run_dir = Path(run_dir)
    turns = ingested_turns if ingested_turns is not None else {s: 100 for s in samples or ["conv-1"]}
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    config = {"model": {"name": model}, "method": {"_target_": f"fake.{method}", **(method_cfg or {})},
              "data": {"samples": samples or ["conv-1"], "questions_per_category": questions_per_category},
              "seed": 0}
    usage = dict(tokens or {"answer": {"calls": len(records), "prompt_tokens": 100 * len(records),
                                       "generated_tokens": 10 * len(records)}})
    # As the runner: ingest usage comes from the memory (built or cached), the rest from the LLM meter.
    state = RunState(ingest_s=timing[0], answer_s=timing[1], ingest_usage={"ingest": usage.pop("ingest", {})})
    protocol = SimpleNamespace(name="amem", settings=lambda: {"protocol": "amem"})
    summary = build_summary(
        records=records, state=state, method_name=method, model_name=model, protocol=protocol,
        categories=CATEGORIES, seed=0,
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
