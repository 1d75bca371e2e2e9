"""summary.json: per-category and average scores, costs, and every setting that changes a number."""
from __future__ import annotations

import platform
from importlib import metadata

from scgmem.harness.pipeline import RunState, question_usage
from scgmem.harness.records import add_counts
from scgmem.scoring.answer_format import unparsed_count
from scgmem.scoring.cat5 import summary_fields as category5_fields
from scgmem.scoring.metrics import aggregate


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "sentence-transformers", "nltk", "scgmem"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def hallucination_counts(records: list[dict], state: RunState) -> tuple[int, int] | None:
    """(keys outside the schema, keys generated) over ingestion and recall, or None without keys.

    Ingestion counts come from the method's stats right after ingest (cached with the memory);
    recall counts are recomputed from each record's generated keys against the exported
    schema, so they survive a resume.
    """
    generated = outside = 0
    has_keys = False
    for stats in state.ingest_stats.values():
        if "keys_generated" in stats:
            has_keys = True
            generated += int(stats["keys_generated"])
            outside += int(stats.get("keys_outside_schema", 0))
    for r in records:
        keys = r.get("generated_keys", r.get("seed_keys"))
        if keys is None:
            continue
        has_keys = True
        schema = state.schemas.get(r["sample_id"], set())
        generated += len(keys)
        outside += sum(1 for k in keys if k not in schema)
    return (outside, generated) if has_keys else None


def context_length(records: list[dict]) -> dict | None:
    """Mean context handed to the answer prompt per question (records without the fields are skipped)."""
    rows = [r for r in records if "context_tokens" in r]
    if not rows:
        return None
    return {"mean_tokens": round(sum(r["context_tokens"] for r in rows) / len(rows), 1),
            "mean_turns": round(sum(r["context_turns"] for r in rows) / len(rows), 2), "n": len(rows)}


def build_summary(*, records, state: RunState, method_name: str, model_name: str, protocol, categories,
                  seed: int, data_info: dict, llm_usage: dict, config: dict, model_load_s: float | None = None,
                  generation: dict | None = None, oom: dict | None = None) -> dict:
    """summary.json. `generation` is the model's report of its effective decoding settings per call
    kind and its chat template (`LLM.generation_report`); `oom`: batches split after CUDA
    out-of-memory (`scgmem.llm.local.oom.OomSplitter.report`). None leaves a field out."""
    scores = aggregate(records, categories)
    counts = hallucination_counts(records, state)
    deviations: dict[str, int] = {}
    # A method's final stats include its ingest counters (restored from the cache too), so
    # each conversation counts once: final stats, or ingest stats if it never got that far.
    for sample_id, ingest in state.ingest_stats.items():
        stats = state.method_stats.get(sample_id, ingest)
        add_counts(deviations, stats.get("deviations") or {})
    if state.usage_log is not None:  # what earlier attempts' answering added (their method objects are gone)
        add_counts(deviations, state.usage_log.prior_deviations)
    # Ingest usage comes from the cache entry when the memory was reused; recall/answer from this run
    # and, on a resume, from the earlier attempts' usage.jsonl lines (`tokens_questions` records covered).
    n = len(records)
    question_side = question_usage(llm_usage)
    tokens_questions = n
    if state.usage_log is not None:
        tokens_questions, question_side = state.usage_log.total(state.questions_written, question_side)
    tokens = {"ingest": state.ingest_usage.get("ingest", {}), **question_side}
    timing = {"ingest_s": round(state.ingest_s, 3), "answer_s": round(state.answer_s, 3),
              "answer_s_per_question": round(state.answer_s / n, 4) if n else None,
              "memory_cache_hits": state.cache_hits}
    if model_load_s is not None:
        timing["model_load_s"] = round(model_load_s, 3)
    summary = {
        "method": method_name,
        "model": model_name,
        "protocol": protocol.name,
        "n_questions": n,
        "categories": scores["categories"],
        "average": scores["average"],  # the paper's: unweighted mean of the category means
        "overall_weighted": scores["overall_weighted"],  # LoCoMo's Overall: mean over all scored questions
        # the average without category 5, and what the category-5 answers say (scgmem/scoring/cat5.py)
        **category5_fields(records, categories, protocol.name),
        "answer_format": {"format": getattr(protocol, "answer_format", None), **(unparsed_count(records) or {})},
        "structural_hallucination_rate": (counts[0] / counts[1] if counts and counts[1] else (0.0 if counts else None)),
        "structural_hallucination_counts": ({"outside_schema": counts[0], "generated": counts[1]} if counts else None),
        "timing": timing,
        "tokens": tokens,
        "tokens_questions": tokens_questions,  # records whose recall/answer counts are in `tokens`
        "context": context_length(records),
        "deviations": deviations,
        "method_stats": {"ingest": state.ingest_stats, "final": state.method_stats},
        "protocol_settings": protocol.settings(),
        "category_mapping": {str(k): v for k, v in categories.items()},
        "seed": seed,
        "data": data_info,
        "versions": _versions(),
        "config": config,
    }
    if generation is not None:
        summary["generation"] = generation
        summary["outputs_cut_at_cap"] = sum(int(c.get("cut_at_cap", 0)) for c in tokens.values())
    if oom is not None:
        summary["oom"] = oom
    return summary
