"""The plan of a run that every process of it must agree on: the derived random streams (one seed per
(seed, sample_id, qa_index, purpose), independent of run order and concurrency) and the checks of
the `run.*` settings that shape the question plan (answer batches, parallel conversations, shards),
and the stored predictions read back against that plan.
Read by the pipeline and, before any model loads, by the runner."""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from scgmem.api import Conversation
from scgmem.data.locomo import scored_questions
from scgmem.harness.records import cut_partial_line, read_predictions
from scgmem.harness.stored_records import check_stored_records

# Purposes of derived random streams, so that recall and prompt randomness never share one.
RECALL, PROMPT, SAMPLING, INGEST = 0, 1, 2, 3


def derive_seed(seed: int, sample_id: str, qa_index: int, purpose: int) -> int:
    """A 63-bit seed from (seed, sample_id, qa_index, purpose), independent of run order."""
    seq = np.random.SeedSequence([seed, zlib.crc32(sample_id.encode()), qa_index + 1, purpose])
    return int(seq.generate_state(1, dtype=np.uint64)[0]) % (2**63)


def rng_for(seed: int, sample_id: str, qa_index: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, sample_id, qa_index, purpose))


def check_run_settings(answer_batch_size, parallel_conversations) -> None:
    """Raise ValueError (one line) for a bad `run.*` value; the runner calls it before loading the model."""
    for name, value in (("answer_batch_size", answer_batch_size), ("parallel_conversations", parallel_conversations)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"run.{name} must be a positive int, got {value!r}")


def parse_question_shard(value) -> tuple[int, int] | None:
    """"I/N" -> (I, N); None -> None. Raises ValueError (one line) for anything else."""
    if value is None:
        return None
    parts = str(value).split("/")
    try:
        index, count = (int(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        index = count = None
    if index is None or count is None or count < 1 or not 0 <= index < count:
        raise ValueError(f"run.question_shard must be 'I/N' with 0 <= I < N (e.g. 0/2), got {value!r}")
    return index, count


def read_stored_predictions(run_dir: Path, conversations: list[Conversation], protocol, seed: int,
                            questions_per_category: int | None) -> list[dict]:
    """predictions.jsonl of `run_dir` read back, each record checked against the question it claims
    in the current data (scgmem/harness/stored_records.py): refused in one line unless all match.
    The runner calls it before the model loads; `Pipeline.run` otherwise."""
    path = Path(run_dir) / "predictions.jsonl"
    records = read_predictions(path, cut=False)
    questions = [q for c in conversations for q in scored_questions(c, protocol.categories, questions_per_category)]
    check_stored_records(records, path, questions, protocol,
                         lambda q: protocol.build_prompt(q, "", rng_for(seed, q.sample_id, q.index, PROMPT)))
    cut_partial_line(path)  # only once every record passed: a refusal leaves the file as it was
    return records
