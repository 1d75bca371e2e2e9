"""What the viewer shows, read from finished runs: one compact row per question for the list, and
per run and conversation the details (records, recall path, memory) loaded when a question of that
conversation opens.

Every run is read through `scgmem.report.collect.load_run`, i.e. `harness.checked_run` (the
reader the reports use: links, special files, sizes, every score recomputed). The memory exports
and the data file's turns are read here with the same bounded readers; a schema memory (SCG-Mem's
`concepts` + `edges`) is checked field by field, another method's export is shown as the JSON it is.
Anything else is a `StoredFileError` (one line, exit 2).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from scgmem.api.paths import is_safe_name
from scgmem.harness.checked_run import category_mapping
from scgmem.harness.judging import read_judgements
from scgmem.harness.safe_files import read_json_file
from scgmem.harness.untrusted import StoredFileError, need_dict, need_int, need_number, need_str
from scgmem.report.collect import NoRunsError, Run, shown_path
from scgmem.report.view.recall_path import Graph, recall_path

MAX_MEMORY_BYTES = 64 << 20  # the largest export committed (A-MEM, one conversation) is ~0.3 MB
# Record fields the question view shows in its own places; any other stored field is listed as is.
SHOWN = {"sample_id", "qa_index", "category", "question", "reference", "prediction", "f1", "bleu1", "reply",
         "evidence", "retrieved", "evidence_recall", "seed_keys", "context_keys", "generated_keys"}
# A row of the question list (one array per question, to keep the index small); index.js names the columns.
ROW = ("conv", "qa_index", "category", "f1", "bleu1", "evidence_recall", "judge", "question", "reference",
       "prediction")


def _rounded(x):
    return None if x is None else round(float(x), 4)


def run_label(run: Run) -> str:
    return f"{run.method} · {run.model} · {shown_path(run.run_dir)}"


def read_memory(run: Run, sample_id: str) -> dict | None:
    """memory/<sample_id>.json of `run` (None when the run wrote none); a schema memory is checked
    field by field, any other export only for size, depth and JSON."""
    if not is_safe_name(sample_id):
        return None  # never a path from such an id (the checked reader accepted it as a record's field)
    path = run.run_dir / "memory" / f"{sample_id}.json"
    if not os.path.lexists(path):
        return None
    memory = need_dict(read_json_file(path, MAX_MEMORY_BYTES), path, "memory")
    if "concepts" in memory and "edges" in memory:
        _check_schema_memory(memory, path)
    return memory


def _check_schema_memory(memory: dict, path: Path) -> None:
    """SCG-Mem's export (architecture contract): concepts {str: [dia_id, ...]}, edges [[u, v, w], ...]."""
    concepts = need_dict(memory["concepts"], path, "concepts")
    for concept, ids in concepts.items():
        if not isinstance(ids, list) or not all(isinstance(d, str) for d in ids):
            raise StoredFileError(path, f"concepts.{concept}", ids, "must be a list of dia_ids")
    edges = memory["edges"]
    if not isinstance(edges, list):
        raise StoredFileError(path, "edges", edges, "must be a list of [u, v, w_uv]")
    for i, edge in enumerate(edges):
        if not (isinstance(edge, list) and len(edge) == 3 and edge[0] in concepts and edge[1] in concepts
                and isinstance(edge[2], (int, float)) and not isinstance(edge[2], bool) and math.isfinite(edge[2])
                and edge[2] >= 0):
            raise StoredFileError(path, f"edges[{i}]", edge, "must be [u, v, w_uv]: two concepts and a weight >= 0")
    if "n_turns" in memory:
        need_int(memory["n_turns"], path, "n_turns", 0, 10**7)


def judge_labels(folder: Path) -> dict[tuple[str, int], list[str]]:
    """(sample_id, qa_index) -> the judge's labels in `folder`'s judgements.jsonl, one per judge run."""
    labels: dict[tuple[str, int], list[str]] = {}
    for row in read_judgements(folder):
        labels.setdefault((str(row.get("sample_id")), int(row.get("qa_index", -1))), []).append(str(row.get("label")))
    return labels


def attach_judge(runs: list[Run], folder: Path) -> Run:
    """The run a `scgmem-report judge --out FOLDER` judged (judge_summary.json's run_dir), its J set
    from the folder's labels; NoRunsError when that run is not among `runs`."""
    from scgmem.harness.judging import JUDGE_SUMMARY, judged_fraction

    path = folder / JUDGE_SUMMARY
    judged = need_str(need_dict(read_json_file(path, 1 << 20), path, "judge_summary").get("run_dir"), path, "run_dir", 4096)
    for run in runs:
        if run.run_dir.resolve() == Path(judged).resolve():
            run.__dict__["judge"] = judged_fraction(folder)  # Run.judge is a cached_property: its value
            run.__dict__["judge_dir"] = folder
            return run
    raise NoRunsError(f"{path}: run_dir: {judged!r}: not one of the runs given to --runs")


def summary_view(run: Run, index: int) -> dict:
    """The run's header: what it is, its settings, and its summary numbers as stored."""
    s = run.summary
    return {"id": index, "label": run_label(run), "dir": shown_path(run.run_dir), "method": run.method,
            "model": run.model, "protocol": s.get("protocol"), "n": len(run.records),
            "categories": category_mapping(s), "average": s.get("average"),
            "settings": {k: v for k, v in (run.config.get("method") or {}).items()
                         if isinstance(v, (str, int, float, bool)) or v is None},
            "judged": bool(run.judge)}


def question_rows(run: Run, conv_index: dict[str, int]) -> list[list]:
    """One ROW per record, in (conversation, qa_index) order."""
    judge = run.judge
    rows = []
    for r in sorted(run.records, key=lambda r: (conv_index[r["sample_id"]], r["qa_index"])):
        key = (r["sample_id"], r["qa_index"])
        rows.append([conv_index[r["sample_id"]], r["qa_index"], r["category"], _rounded(r["f1"]), _rounded(r["bleu1"]),
                     _rounded(r.get("evidence_recall")), _rounded(judge.get(key)), r["question"], r["reference"],
                     r["prediction"]])
    return rows


def _items_holding(memory: dict, retrieved: set[str]) -> list[dict]:
    """A baseline's memory items (list entries carrying `dia_id` or `dia_ids`) that hold a retrieved
    turn: the notes, units, pages or entries the retrieved dia_ids came from."""
    found = []
    for field, value in memory.items():
        if not isinstance(value, list):
            continue
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            ids = item.get("dia_ids") if isinstance(item.get("dia_ids"), list) else [item.get("dia_id")]
            hit = [d for d in ids if isinstance(d, str) and d in retrieved]
            if hit:
                found.append({"field": field, "index": i, "hit": hit})
    return found


def conversation_details(run: Run, sample_id: str, settings: dict) -> dict:
    """Run x conversation: each record's full fields, SCG-Mem's recall path, the memory export."""
    memory = read_memory(run, sample_id)
    schema = memory is not None and "edges" in memory
    graph = Graph(memory) if schema else None
    labels = judge_labels(run.__dict__.get("judge_dir", run.run_dir)) if run.judge else {}
    if graph is not None:  # SCG-Mem's T and hops draw the path; named as checked_run names config fields
        where = run.run_dir / "summary.json"
        temperature = need_number(settings.get("temperature", 1.0), where, "config.method.temperature", 1e-6, 1e6)
        hops = need_int(settings.get("hops", 1), where, "config.method.hops", 0, 1000)
    records = {}
    for r in run.records:
        if r["sample_id"] != sample_id:
            continue
        detail = {"reply": r.get("reply"), "evidence": r.get("evidence") or [], "retrieved": r.get("retrieved") or [],
                  "seed_keys": r.get("seed_keys"), "context_keys": r.get("context_keys"),
                  "generated_keys": r.get("generated_keys"), "judge": labels.get((sample_id, r["qa_index"])),
                  "fields": {k: v for k, v in r.items() if k not in SHOWN}}
        if graph is not None and "context_keys" in r:
            detail["path"] = recall_path(r, graph, temperature=temperature, hops=hops)
        elif memory is not None:
            detail["items"] = _items_holding(memory, set(detail["retrieved"]))
        records[str(r["qa_index"])] = detail
    return {"records": records, "memory": memory, "schema": schema}


def turn_texts(conversations) -> dict[str, dict[str, list]]:
    """sample_id -> dia_id -> [speaker, text, session date, image caption or None]."""
    return {c.sample_id: {t.dia_id: [t.speaker, t.text, t.date_time, t.caption] for t in c.turns}
            for c in conversations}
