"""The paper's run settings, and how a run departs from them.

The paper ran every model "with full precision for accurate logit manipulation" and BGE-M3
"across all experiments" (Sections 4.3-4.4, results/paper/README.md), and scored BLEU-1 with
A-MEM's `nltk.word_tokenize` (punkt). The experiments (configs/experiment/*.yaml) select
`settings=paper`, which applies the first two on the paper's models (configs/settings/); the
report flags every cell whose run differs (`deviations`).

    >>> deviations({"model": {"dtype": "bfloat16"}, "embedder": {"name": "minilm"}},
    ...            {"protocol_settings": {"bleu1": {"tokenizer": "punkt"}}})
    ['dtype bfloat16', 'embedder minilm']
"""
from __future__ import annotations

PAPER_DTYPE = "float32"
PAPER_EMBEDDER = "bge-m3"
PAPER_BLEU_TOKENIZER = "punkt"
# Short marks for table cells, in the order `deviations` lists them.
MARKS = {"dtype": "d", "embedder": "e", "bleu": "t", "speed": "b"}


def deviations(config: dict, summary: dict) -> list[str]:
    """What of the paper's settings a run did not use, e.g. ["dtype bfloat16", "bleu tokeniser
    treebank_preserve_line"]; [] for a run with the paper's settings. A setting the run did not
    record counts as unknown, not as a deviation."""
    out = []
    dtype = (config.get("model") or {}).get("dtype")
    if dtype is not None and str(dtype) != PAPER_DTYPE:
        out.append(f"dtype {dtype}")
    embedder = (config.get("embedder") or {}).get("name")
    if embedder is not None and str(embedder) != PAPER_EMBEDDER:
        out.append(f"embedder {embedder}")
    tokenizer = ((summary.get("protocol_settings") or {}).get("bleu1") or {}).get("tokenizer")
    if tokenizer is not None and tokenizer != PAPER_BLEU_TOKENIZER:
        out.append(f"bleu tokeniser {tokenizer}")
    # Batching changed on a resume: in half precision a row's numbers depend on its batch.
    if summary.get("speed_changes") and dtype is not None and str(dtype) != PAPER_DTYPE:
        out.append("batching changed on resume")
    return out


def marks(found: list[str]) -> str:
    """The cell marks of `deviations` output, e.g. "d,t"."""
    keys = {"dtype": "dtype", "embedder": "embedder", "bleu": "bleu", "batching": "speed"}
    return ",".join(MARKS[keys[d.split()[0]]] for d in found)


def check_embedder_choice(overrides: list[str], choices: dict, embedder_name: str) -> str | None:
    """A problem line when the command line chose an embedder (`embedder=<x>` in `overrides`) that
    settings=paper replaced (a paper model's settings file sets the embedder after the group
    choice), else None."""
    chosen = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == "embedder"), None)
    if choices.get("settings") == "paper" and chosen and chosen != embedder_name:
        return (f"embedder={chosen}: settings=paper uses {embedder_name} on this model; add settings=own "
                "for the configs' own settings (bfloat16, MiniLM), or keep the paper's embedder")
    return None
