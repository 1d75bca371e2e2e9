"""A finished run directory read back for reports: the checks a resume makes, and every number of
summary.json the report prints recomputed from the records.

`scgmem-report` (collect, tables, claims, costs, figures, merge, rescore, judge) reads run
directories only through `read_checked_run`, so a report can never print a number that does not
recompute from the stored predictions:

- files: no symlink that the resume refuses, no FIFO or other special file (refused without
  opening it), each file bounded in size;
- records (`predictions.jsonl`): each a distinct question; every score recomputes from its
  stored prediction (`stored_records.check_record`). When the data file the run names (or the
  report's `--data`) is present, each record must also be a question the run asks of that data,
  with the data's text, gold and evidence: exactly the resume's check (its sha256 must equal the
  one run.json recorded). Without the data file the record's own reference is scored;
- summary.json: a JSON object whose numbers are finite and in range, whose scores equal the
  aggregate of the records and whose `n_questions` counts them;
- the config: summary.json's `config` (resolved by the run itself) or `.hydra/config.yaml` read
  without resolving interpolations (`${oc.env:...}` stays text); the protocol that rescores the
  records is one of the project's classes, built from plain values (no `_target_` is imported
  and no interpolation resolved on a report's machine).

Anything else is one line `<file>: <field>: <value>: <why>` (`StoredFileError`, exit 2).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path

from scgmem.harness.rundir import file_sha256, read_run_json
from scgmem.harness.records import read_predictions
from scgmem.harness.safe_files import check_run_dir_links, read_bounded, read_json_file
from scgmem.harness.stored_records import TOLERANCE, check_record, check_stored_records
from scgmem.harness.untrusted import StoredFileError, need_dict, need_int, need_str, walk

log = logging.getLogger(__name__)

MAX_SUMMARY_BYTES = 64 << 20  # a summary is tens of KB (its method stats at most a few MB)
MAX_CONFIG_BYTES = 4 << 20
MAX_COUNT = 10**12  # as usage.jsonl: above any count one run makes
MAX_SECONDS = 1e9
# The protocols a stored config may name (runs older than scgmem.scoring named scgmem.protocols.<Class>).
PROTOCOLS = ("AmemProtocol", "LocomoProtocol")
PROTOCOL_MODULES = ("scgmem.scoring.protocols", "scgmem.protocols")


def _near(a, b) -> bool:
    """Stored and recomputed summary values agree (both None, equal, or numbers within rounding)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_near(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return math.isfinite(a) and abs(a - b) <= TOLERANCE * max(1.0, abs(b))


def read_summary(path: Path) -> dict:
    """summary.json as the runner writes it: numbers finite, counts and seconds in range."""
    summary = need_dict(read_json_file(path, MAX_SUMMARY_BYTES), path, "summary.json")
    for where, value in walk(summary):  # JSON allows 1e400, which Python reads as inf
        if isinstance(value, float) and not math.isfinite(value):
            raise StoredFileError(path, where, value, "must be a finite number")
    for key in ("model", "method", "protocol"):
        need_str(summary.get(key), path, key, 200)
    need_int(summary.get("n_questions"), path, "n_questions", 0, 10**7)
    mapping = need_dict(summary.get("category_mapping"), path, "category_mapping")
    for number, name in mapping.items():
        if number not in ("1", "2", "3", "4", "5") or not isinstance(name, str) or not name:
            raise StoredFileError(path, f"category_mapping.{number}", name, "must map LoCoMo numbers 1-5 to names")
    if list(need_dict(summary.get("categories"), path, "categories")) != list(mapping.values()):
        raise StoredFileError(path, "categories", list(summary["categories"]), "must be the category_mapping's names")
    for phase, counts in need_dict(summary.get("tokens") or {}, path, "tokens").items():
        for name, n in need_dict(counts, path, f"tokens.{phase}").items():
            need_int(n, path, f"tokens.{phase}.{name}", 0, MAX_COUNT)
    if summary.get("tokens_questions") is not None:
        need_int(summary["tokens_questions"], path, "tokens_questions", 0, 10**7)
    for name, value in need_dict(summary.get("timing") or {}, path, "timing").items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value <= MAX_SECONDS):
            raise StoredFileError(path, f"timing.{name}", value, f"must be a number in [0, {MAX_SECONDS:g}]")
    turns = need_dict((summary.get("data") or {}).get("ingested_turns") or {}, path, "data.ingested_turns")
    for sample, n in turns.items():
        need_int(n, path, f"data.ingested_turns.{sample}", 0, 10**7)
    check_cost_fields(summary, path)
    return summary


def check_cost_fields(summary: dict, path: Path) -> None:
    """The fields the cost table divides by or prints beside the scores agree with each other: the
    records the question counts cover (`tokens_questions`) are at most those stored, seconds per
    question are the answering seconds over the questions, the turn counts are of the slice's
    conversations and add up to their total, and the deviations are counts."""
    n = summary["n_questions"]
    if summary.get("tokens_questions") is not None:
        need_int(summary["tokens_questions"], path, "tokens_questions", 0, n)
    timing = summary.get("timing") or {}
    per_question = timing.get("answer_s_per_question")
    if per_question is not None and n and isinstance(timing.get("answer_s"), (int, float)) \
            and abs(per_question - timing["answer_s"] / n) > 1e-3 * max(1.0, per_question):
        raise StoredFileError(path, "timing.answer_s_per_question", per_question,
                              f"timing.answer_s / n_questions is {timing['answer_s'] / n:.4f}")
    data = summary.get("data") or {}
    turns, samples = data.get("ingested_turns") or {}, data.get("samples")
    if isinstance(samples, list) and set(turns) - set(samples):  # a missing count: the cost table names it
        raise StoredFileError(path, "data.ingested_turns", sorted(set(turns) - set(samples))[:5],
                              f"counts conversations the run did not answer (data.samples {samples[:5]})"[:200])
    if turns and data.get("ingested_turns_total") is not None and data["ingested_turns_total"] != sum(turns.values()):
        raise StoredFileError(path, "data.ingested_turns_total", data["ingested_turns_total"],
                              f"data.ingested_turns add up to {sum(turns.values())}")
    for name, count in need_dict(summary.get("deviations") or {}, path, "deviations").items():
        need_int(count, path, f"deviations.{name}", 0, MAX_COUNT)


def category_mapping(summary: dict) -> dict[int, str]:
    return {int(k): str(v) for k, v in summary["category_mapping"].items()}


def check_summary_scores(summary: dict, records: list[dict], path: Path) -> None:
    """Refuse a summary whose scores are not the aggregate of `records` (the ones it was built from)."""
    from scgmem.scoring.cat5 import summary_fields
    from scgmem.scoring.metrics import aggregate

    if summary["n_questions"] != len(records):
        raise StoredFileError(path, "n_questions", summary["n_questions"],
                              f"predictions.jsonl holds {len(records)} records")
    categories = category_mapping(summary)
    expected = {**aggregate(records, categories), **summary_fields(records, categories, summary["protocol"])}
    for key, value in expected.items():
        if key in summary and not _near(summary[key], value):
            raise StoredFileError(path, key, summary[key], f"the records give {value!r}"[:200])
        if key in ("categories", "average") and key not in summary:
            raise StoredFileError(path, key, None, "missing")


def _no_interpolation(node, path, field: str) -> None:
    for where, value in walk(node):
        if isinstance(value, str) and "${" in value:
            raise StoredFileError(path, f"{field}.{where}", value, "an interpolation; a report never resolves one")


def read_yaml(path: Path):
    """A YAML file Hydra wrote (.hydra/*.yaml, multirun.yaml) as plain data: bounded, and no
    `${...}` resolved (OmegaConf would resolve one, an environment variable included, when a value
    is read)."""
    import yaml

    try:
        return yaml.safe_load(read_bounded(path, MAX_CONFIG_BYTES))
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        raise StoredFileError(path, "file", (str(e).splitlines() or [""])[0], "not valid YAML") from None


def stored_config(run_dir: Path, summary: dict) -> dict:
    """The run's config: summary.json's (resolved by the run) or `.hydra/config.yaml` as plain data."""
    config = summary.get("config")
    if isinstance(config, dict):
        return config
    path = run_dir / ".hydra" / "config.yaml"
    if not os.path.lexists(path):
        return {}
    loaded = read_yaml(path)
    return need_dict(loaded if loaded is not None else {}, path, "config")


def stored_overrides(run_dir: Path) -> list[str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not os.path.lexists(path):
        return []
    loaded = read_yaml(path)
    if not isinstance(loaded, list):
        raise StoredFileError(path, "file", loaded, "must be a list of overrides")
    return [str(o) for o in loaded]


def protocol_of(config: dict, categories: dict[int, str], path: Path):
    """The run's protocol, scoring only (no BERTScore, chat or judge), from plain stored values."""
    from scgmem.scoring import protocols

    node = dict(need_dict(config.get("protocol"), path, "config.protocol"))
    target = str(node.pop("_target_", ""))
    module, _, name = target.rpartition(".")
    if module not in PROTOCOL_MODULES or name not in PROTOCOLS:
        raise StoredFileError(path, "config.protocol._target_", target,
                              f"not one of the project's protocols ({', '.join(PROTOCOLS)})")
    _no_interpolation(node, path, "config.protocol")
    for key in ("chat", "judge"):  # the chat policy and the judge are not the protocol's constructor's
        node.pop(key, None)
    node["bertscore"] = False  # a model, not recomputed (stored_records checks its range)
    try:
        return getattr(protocols, name)(categories=categories, **node)
    except (TypeError, ValueError) as e:
        raise StoredFileError(path, "config.protocol", str(e), "not a protocol this code builds") from None


def data_of(config: dict, path: Path, data_path: str | Path | None, gold: str | None = None):
    """The LoCoMoSource of the run's data slice, or None when its file is not on this machine."""
    from scgmem.data.locomo import LoCoMoSource

    node = {k: v for k, v in need_dict(config.get("data") or {}, path, "config.data").items() if k != "_target_"}
    _no_interpolation(node, path, "config.data")
    if data_path is not None:
        node["path"] = str(data_path)
    if gold is not None:
        node["gold"] = gold
    if not isinstance(node.get("path"), str) or not Path(node["path"]).is_file():
        return None
    try:
        return LoCoMoSource(**node)
    except (TypeError, ValueError) as e:
        raise StoredFileError(path, "config.data", str(e), "not a data slice this code reads") from None


@dataclasses.dataclass
class CheckedRun:
    summary: dict
    config: dict
    overrides: list[str]
    records: list[dict]
    data_checked: bool  # records checked against the data file (else against their own references)


_DATA: dict[tuple, tuple] = {}  # (path, sha256, settings) -> loaded conversations: sweeps share one file


def _conversations(source):
    key = (source.path, file_sha256(source.path), repr(sorted(vars(source).items(), key=str)))
    if key not in _DATA:
        _DATA.clear()
        _DATA[key] = source.load()[0]
    return _DATA[key], key[1]


def check_records(run_dir: Path, records: list[dict], config: dict, summary: dict,
                  data_path: str | Path | None = None) -> bool:
    """Refuse `records` unless each recomputes (see the module docstring); True when they were checked
    against the run's data file, False when only against their own references."""
    path = run_dir / "predictions.jsonl"
    config_path = run_dir / "summary.json"
    categories = category_mapping(summary)
    protocol = protocol_of(config, categories, config_path)
    seed = need_int(config.get("seed", summary.get("seed", 0)), config_path, "config.seed", 0, 2**63)
    from scgmem.data.locomo import scored_questions
    from scgmem.harness.pipeline import PROMPT, rng_for

    def prompt_of(q):
        return protocol.build_prompt(q, "", rng_for(seed, q.sample_id, q.index, PROMPT))

    source = data_of(config, config_path, data_path)
    if source is not None:
        conversations, digest = _conversations(source)
        run_json = run_dir / "run.json"
        stored = (read_run_json(run_json).get("data") or {}).get("data") if run_json.is_file() else None
        if stored is not None and stored != digest and data_path is None:
            raise StoredFileError(run_json, "data.data", stored[:16], f"{source.path} is not the data file this run "
                                  f"answered (sha256 {digest[:16]}); pass the run's data file")
        turns = (summary.get("data") or {}).get("ingested_turns") or {}
        for c in conversations:  # the cost table's turns per conversation are the data's
            if c.sample_id in turns and turns[c.sample_id] != len(c.turns):
                raise StoredFileError(config_path, f"data.ingested_turns.{c.sample_id}", turns[c.sample_id],
                                      f"the data file's slice has {len(c.turns)} turns")
        questions = [q for c in conversations for q in scored_questions(c, protocol.categories,
                                                                         source.questions_per_category)]
        check_stored_records(records, path, questions, protocol, prompt_of)
        return True
    from scgmem.api.types import QA

    samples = (config.get("data") or {}).get("samples")
    seen: dict[tuple, int] = {}
    for number, r in enumerate(records, 1):
        key = (r["sample_id"], r["qa_index"])
        if isinstance(samples, list) and key[0] not in samples:
            raise StoredFileError(path, f"line {number}: field 'sample_id'", key[0],
                                  f"not a conversation this run answers (data.samples {samples})"[:200])
        if key in seen:
            raise StoredFileError(path, f"line {number}: field 'qa_index'", key[1],
                                  f"duplicate of line {seen[key]}: each question is answered once")
        seen[key] = number
        need_int(key[1], path, f"line {number}: field 'qa_index'", 0, 10**7)  # seeds the prompt's rng below
        category, reference = r.get("category"), r.get("reference")
        if category not in categories or not isinstance(reference, str):
            raise StoredFileError(path, f"line {number}: field 'category'", category,
                                  f"must be a scored category ({sorted(categories)}) with a string reference")
        evidence = r.get("evidence")
        q = QA(sample_id=key[0], index=key[1], question=need_str(r.get("question"), path, f"line {number}: field "
                                                                  "'question'"),
               category=category, answer=reference, adversarial_answer=reference,
               evidence=tuple(evidence) if isinstance(evidence, list) else ())
        options = r.get("options")
        if options is not None and not (isinstance(options, list) and len(options) == 2
                                        and all(isinstance(o, str) for o in options)):
            raise StoredFileError(path, f"line {number}: field 'options'", options, "must be two strings")
        prompt = dataclasses.replace(prompt_of(q), options=options)
        check_record(r, q, protocol, path, f"line {number} ({key[0]} qa {key[1]})", prompt)
    return False


def read_checked_run(run_dir: str | Path, data_path: str | Path | None = None) -> CheckedRun:
    """One finished run directory, every file checked (module docstring); StoredFileError otherwise."""
    run_dir = Path(run_dir)
    check_run_dir_links(run_dir)
    summary = read_summary(run_dir / "summary.json")
    config = stored_config(run_dir, summary)
    path = run_dir / "predictions.jsonl"
    if not path.is_file():
        raise StoredFileError(path, "file", "missing", "the report needs the per-question records of every run")
    records = read_predictions(path, cut=False)
    checked = check_records(run_dir, records, config, summary, data_path)
    check_summary_scores(summary, records, run_dir / "summary.json")
    return CheckedRun(summary=summary, config=config, overrides=stored_overrides(run_dir), records=records,
                      data_checked=checked)

