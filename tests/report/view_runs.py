"""Runs for the viewer's tests: a hostile pair (every text a run or data file can carry is an
HTML/JavaScript payload, every score still recomputes, so the checked reader accepts them) and
the committed runs the acceptance names."""
from __future__ import annotations

import json
from pathlib import Path

from scgmem.scoring.metrics import evidence_recall
from tests.report import rec, rescored, write_run

ROOT = Path(__file__).resolve().parents[2]
SERVED_SCGMEM = ROOT / "results/served/conv26_vllm/runs/table1/scgmem"
EMBEDDED_SCGMEM = ROOT / "results/embedded/conv26_full/runs/table1/scgmem"
LOCOMO_FULL = ROOT / "results/embedded/locomo_full"

# The network payloads point at a listener the browser test runs (port in the project's 18600-18699).
LISTENER_PORT = 18642
BEACON = f"http://127.0.0.1:{LISTENER_PORT}"
PAYLOADS = [
    "<script>alert('script')</script>",
    "<img src=x onerror=\"alert('img')\">",
    f"<img src=\"{BEACON}/img\">",
    "<a href=\"javascript:alert('link')\">click</a>",
    "<svg onload=\"alert('svg')\"><circle r=9></circle></svg>",
    f"<iframe src=\"{BEACON}/iframe\"></iframe>",
    f"<link rel=\"stylesheet\" href=\"{BEACON}/css\">",
    "\"><script>alert('attr')</script>",
    "</pre><b onmouseover=\"alert('b')\">bold</b>",
    f"<object data=\"{BEACON}/object\"></object>",
]


def payload(i: int) -> str:
    return PAYLOADS[i % len(PAYLOADS)]


def hostile_data(path: Path) -> Path:
    """A LoCoMo file for conv-1 whose speakers, dates and turns are payloads."""
    turns = [{"speaker": payload(i), "dia_id": f"D1:{i + 1}", "text": payload(i + 3)} for i in range(4)]
    data = [{"sample_id": "conv-1",
             "conversation": {"speaker_a": payload(0), "speaker_b": payload(1), "session_1_date_time": payload(2),
                              "session_1": turns},
             "qa": [{"question": "q?", "answer": "a", "evidence": ["D1:1"], "category": 4}]}]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def hostile_runs(root: Path) -> list[Path]:
    """An SCG-Mem-shaped run and a baseline-shaped run over the same questions, payloads everywhere."""
    runs = []
    for method, keyed in ((payload(0), True), (payload(1), False)):
        records = []
        for i in range(6):
            r = rec("conv-1" if i < 5 else payload(4), i, [1, 2, 4, 5][i % 4], [1.0, 0.5, 0.0][i % 3])
            r = rescored({**r, "question": payload(i), "reference": payload(i + 1),
                          "prediction": payload(i + 2) + " " + r["prediction"]})
            r.update(reply=payload(i + 5), answer_parsed=False, retrieved=["D1:1", payload(i + 6), "toString"],
                     evidence=["D1:1", "D1:3", "__proto__"],
                     qa_steps=[payload(i + 7)])
            r["evidence_recall"] = evidence_recall(r["evidence"], r["retrieved"])
            if keyed:
                r.update(seed_keys=[payload(0), "c1"], context_keys=[payload(0), "c1", payload(3), "__proto__"],
                         generated_keys=[payload(0), payload(5)])
            records.append(r)
        run = write_run(root / f"run{len(runs)}", model=payload(8), method=method, records=records,
                        method_cfg={"k": 3, "hops": 1, "temperature": 1.0, "note": payload(9)})
        # "__proto__" and "constructor": keys a JS object literal or a plain {} lookup would mistake
        memory = ({"n_turns": 4, "concepts": {payload(0): ["D1:1", "D1:2"], "c1": ["D1:1", "D1:3"], payload(3): ["D1:3"],
                                              "__proto__": ["D1:4"], "constructor": ["D1:4"]},
                   "edges": [[payload(0), "c1", 2.0], ["c1", payload(3), 1.0], ["__proto__", "constructor", 1.0],
                             ["c1", "__proto__", 0.5]]} if keyed else
                  {"summary": payload(2), "notes": [{"dia_id": "D1:1", "content": payload(i), "keywords": [payload(5)]}
                                                    for i in range(4)]})
        (run / "memory").mkdir()
        (run / "memory" / "conv-1.json").write_text(json.dumps(memory), encoding="utf-8")
        runs.append(run)
    return runs
