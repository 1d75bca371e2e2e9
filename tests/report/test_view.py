"""Issue 60, `scgmem-report view` without a browser: the data it writes (names from indices only,
strings as JSON), SCG-Mem's recall path against hand-computed values, refused runs and folders, the
committed runs of the acceptance and `--serve`. The page itself: test_view_browser.py."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from scgmem.report.cli import main
from scgmem.report.view import build_site
from scgmem.report.view.recall_path import Graph, recall_path
from tests.report.view_runs import EMBEDDED_SCGMEM, LOCOMO_FULL, PAYLOADS, SERVED_SCGMEM, hostile_data, hostile_runs


def read_data(path):
    """The JSON a data/*.js file hands to SCGV.receive, and the name it gives."""
    text = path.read_text(encoding="ascii")  # ensure_ascii: no raw U+2028 or other non-ASCII in a script
    match = re.fullmatch(r'SCGV\.receive\("([a-z0-9_]+)",JSON\.parse\((".*")\)\);\n', text, re.S)
    assert match, text[:80]
    return match.group(1), json.loads(json.loads(match.group(2)))


def test_recall_path_gives_each_reached_concept_its_strongest_link_and_softmax():
    memory = {"concepts": {"a": ["D1:1"], "b": ["D1:2"], "x": ["D1:1", "D1:3"], "y": ["D1:3"], "z": ["D2:1"]},
              "edges": [["a", "x", 3.0], ["a", "y", 1.0], ["b", "x", 1.0], ["b", "z", 2.0]]}
    record = {"seed_keys": ["a", "b"], "context_keys": ["a", "b", "x", "z"], "retrieved": ["D1:1", "D2:1"],
              "evidence": ["D1:3", "D2:1"]}
    path = recall_path(record, Graph(memory), temperature=2.0, hops=1)
    p_xa = math.exp(3 / 2) / (math.exp(3 / 2) + math.exp(1 / 2))  # a's neighbours x (3), y (1)
    p_xb = math.exp(1 / 2) / (math.exp(1 / 2) + math.exp(2 / 2))   # b's neighbours x (1), z (2)
    assert p_xa > p_xb
    assert path["reached"] == [[2, 0, 3.0, round(p_xa, 4)], [3, 1, 2.0, round(1 - p_xb, 4)]]
    assert path["turns"] == {"D1:1": [0, 2], "D2:1": [3]}
    assert path["evidence"] == [{"dia_id": "D1:3", "retrieved": False, "active": [2], "other": ["y"]},
                                {"dia_id": "D2:1", "retrieved": True, "active": [3], "other": []}]
    assert path["unknown"] == []


def test_hostile_strings_reach_the_data_files_as_json_under_index_names(tmp_path):
    runs = hostile_runs(tmp_path / "runs")
    page = build_site(runs, tmp_path / "site", hostile_data(tmp_path / "locomo.json"), n_resamples=50)
    names = sorted(p.name for p in (page.parent / "data").iterdir())
    assert all(re.fullmatch(r"(index|t\d+|r\d+_c\d+)\.js", n) for n in names), names
    name, index = read_data(page.parent / "data" / "index.js")
    assert name == "index" and len(index["runs"]) == 2
    texts = json.dumps(index) + "".join(json.dumps(read_data(p)[1]) for p in (page.parent / "data").iterdir())
    for payload in PAYLOADS:  # every payload arrives whole, as a JSON string, to be shown as text
        assert json.dumps(payload)[1:-1] in texts
    _, conv = read_data(page.parent / "data" / f"r0_c{index['samples'].index('conv-1')}.js")
    assert conv["schema"] and all("path" in r for r in conv["records"].values())


def test_a_refused_run_is_one_line_and_exit_2(tmp_path, capsys):
    run = hostile_runs(tmp_path / "runs")[0]
    lines = (run / "predictions.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    lines[0] = json.dumps({**record, "f1": 1.0 - record["f1"]})  # a score its prediction does not give
    (run / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["view", "--runs", str(run), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: view: ") and "predictions.jsonl" in err[0], err
    assert not (tmp_path / "site" / "index.html").exists()


def test_a_memory_export_that_is_not_a_schema_is_refused(tmp_path, capsys):
    run = hostile_runs(tmp_path / "runs")[0]
    memory = json.loads((run / "memory" / "conv-1.json").read_text())
    memory["edges"].append(["c1", "not a concept", 1.0])
    (run / "memory" / "conv-1.json").write_text(json.dumps(memory))
    assert main(["view", "--runs", str(run), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.strip()
    assert "conv-1.json" in err and f"edges[{len(memory['edges']) - 1}]" in err and "\n" not in err


def test_a_folder_the_view_did_not_write_is_refused_and_its_own_is_rewritten(tmp_path, capsys):
    run = hostile_runs(tmp_path / "runs")[0]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert main(["view", "--runs", str(run), "--out", str(tmp_path / "other"), "--n-resamples", "20"]) == 2
    assert "not a folder this command wrote" in capsys.readouterr().err
    for _ in range(2):
        assert main(["view", "--runs", str(run), "--out", str(tmp_path / "site"), "--n-resamples", "20"]) == 0
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines() if line]


def test_the_committed_scgmem_runs_of_the_acceptance(tmp_path):
    """Both committed conv-26 SCG-Mem runs (served and local): a row per record, a recall path for
    each, its positions inside the record's active concepts, evidence located in the memory."""
    page = build_site([EMBEDDED_SCGMEM, SERVED_SCGMEM], tmp_path / "site", n_resamples=200)
    _, index = read_data(page.parent / "data" / "index.js")
    assert [len(rows) for rows in index["rows"]] == [len(_records(EMBEDDED_SCGMEM)), len(_records(SERVED_SCGMEM))]
    assert set(index["pairs"]) == {"0,1"} and index["pairs"]["0,1"]["average"]["n"] == len(_records(SERVED_SCGMEM))
    for i, run_dir in enumerate((EMBEDDED_SCGMEM, SERVED_SCGMEM)):
        _, conv = read_data(page.parent / "data" / f"r{i}_c0.js")
        memory = json.loads((run_dir / "memory" / "conv-26.json").read_text())
        assert conv["memory"] == memory
        for r in _records(run_dir):
            path = conv["records"][str(r["qa_index"])]["path"]
            n = len(r["context_keys"])
            assert len(path["reached"]) == n - len(set(r["seed_keys"]) & set(r["context_keys"]))
            assert all(0 <= v < n and (u is None or 0 <= u < n) for v, u, _, _ in path["reached"])
            assert list(path["turns"]) == r["retrieved"]
            for e in path["evidence"]:
                assert e["retrieved"] == (e["dia_id"] in r["retrieved"])
                grounded = {c for c, ids in memory["concepts"].items() if e["dia_id"] in ids}
                assert {r["context_keys"][p] for p in e["active"]} | set(e["other"]) == grounded


@pytest.mark.slow
def test_the_full_locomo_run_builds(tmp_path):
    page = build_site([LOCOMO_FULL], tmp_path / "site", n_resamples=200)
    _, index = read_data(page.parent / "data" / "index.js")
    assert len(index["rows"][0]) == len(_records(LOCOMO_FULL)) and len(index["samples"]) == 10
    assert sum(p.stat().st_size for p in page.parent.rglob("*")) < 20e6


def test_serve_sends_the_page_with_its_content_security_policy(tmp_path):
    run = hostile_runs(tmp_path / "runs")[0]
    port = 18661
    proc = subprocess.Popen([sys.executable, "-m", "scgmem.report.cli", "view", "--runs", str(run), "--out",
                             str(tmp_path / "site"), "--n-resamples", "20", "--serve", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=2) as reply:
                    csp, body = reply.headers["Content-Security-Policy"], reply.read().decode()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.3)
        assert "default-src 'none'" in csp and "connect-src 'none'" in csp
        assert "<script src=\"data/index.js\"></script>" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_judge_folder_attaches_its_labels_to_the_run_it_names(tmp_path, capsys):
    run = hostile_runs(tmp_path / "runs")[0]
    folder = tmp_path / "judge"
    folder.mkdir()
    (folder / "judge_summary.json").write_text(json.dumps({"run_dir": str(run)}))
    labels = ["CORRECT", "WRONG", "CORRECT"]  # three judge runs of question conv-1 qa 0: J = 2/3
    (folder / "judgements.jsonl").write_text("".join(json.dumps(
        {"sample_id": "conv-1", "qa_index": 0, "category": 1, "run": i, "label": label, "parsed": True, "reply": label,
         "gold": "g"}) + "\n" for i, label in enumerate(labels)))
    page = build_site([run], tmp_path / "site", judges=[folder], n_resamples=20)
    _, index = read_data(page.parent / "data" / "index.js")
    judge = index["columns"].index("judge")
    assert index["runs"][0]["judged"] and [r[judge] for r in index["rows"][0] if r[1] == 0] == [round(2 / 3, 4)]
    _, conv = read_data(page.parent / "data" / f"r0_c{index['samples'].index('conv-1')}.js")
    assert conv["records"]["0"]["judge"] == labels and conv["records"]["1"]["judge"] is None
    (folder / "judge_summary.json").write_text(json.dumps({"run_dir": str(tmp_path / "elsewhere")}))
    assert main(["view", "--runs", str(run), "--out", str(tmp_path / "site2"), "--judge", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "judge_summary.json: run_dir" in err and "not one of the runs" in err and "\n" not in err


@pytest.mark.parametrize("temperature", [0.0, -1.0, "warm"])
def test_a_temperature_the_recall_path_cannot_use_is_refused(tmp_path, capsys, temperature):
    run = hostile_runs(tmp_path / "runs")[0]
    summary = json.loads((run / "summary.json").read_text())
    summary["config"]["method"]["temperature"] = temperature
    (run / "summary.json").write_text(json.dumps(summary))
    (run / ".hydra" / "config.yaml").unlink()
    assert main(["view", "--runs", str(run), "--out", str(tmp_path / "site"), "--n-resamples", "20"]) == 2
    err = capsys.readouterr().err.strip()
    assert "config.method.temperature" in err and "\n" not in err
