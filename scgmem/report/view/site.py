"""Write the viewer: the static assets (index.html, view.css, view*.js) and the runs' data as
script files under data/, loaded by the page on demand (per run and conversation), so the site
opens from file:// with no server (a browser refuses fetch() there, not <script src>).

Layout of OUT:
    index.html view.css view.js view_question.js view_memory.js view_compare.js   (package assets)
    data/index.js      runs, summary tables with CIs, paired tables, one row per question
    data/t<c>.js       conversation c's turns (speaker, text, date) from the data file
    data/r<i>_c<c>.js  run i x conversation c: records' details, recall paths, memory export
File names carry indices only, never a name from a run. Each data file is one call
`SCGV.receive("<name>", JSON.parse("<JSON>"))` (`_script`), and the page puts every string into the
DOM as text (view.js `SCGV.txt`).
"""
from __future__ import annotations

import json
import logging
import shutil
from importlib import resources
from pathlib import Path

from scgmem.data.locomo import load_locomo
from scgmem.report.collect import NoRunsError, Run, collect_all
from scgmem.report.output import write_output
from scgmem.report.paired import N_RESAMPLES
from scgmem.report.view import extract, stats

log = logging.getLogger(__name__)

ASSETS = ("index.html", "view.css", "view.js", "view_question.js", "view_memory.js", "view_compare.js")
MARKER = ".scgmem-view"  # a folder holding it was written by this command and may be rewritten


def _script(name: str, obj) -> str:
    """`SCGV.receive("<name>",JSON.parse("<JSON>"))`: parsed, not evaluated as a JS literal, so a key
    "__proto__" from a run stays a key (a literal would set the object's prototype); ASCII escapes
    keep every character of the file plain."""
    payload = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return f"SCGV.receive({json.dumps(name)},JSON.parse({json.dumps(payload)}));\n"


def _prepare(out: Path) -> Path:
    """OUT, created or emptied of an earlier view; refused when it holds anything else."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise NoRunsError(f"{out}: not empty and not a folder this command wrote; pass a new --out")
    if (out / "data").is_dir() and not (out / "data").is_symlink():
        shutil.rmtree(out / "data")
    (out / "data").mkdir(parents=True, exist_ok=True)
    write_output(out / MARKER, "written by scgmem-report view\n")
    return out


def _turns(runs: list[Run], data: str | Path | None, samples: list[str]) -> tuple[dict, str | None]:
    """The data file's turns of `samples` and the file's shown path; ({}, None) when no data file is
    on this machine (the view then says so where turn text would be)."""
    candidates = [data] if data is not None else [(r.config.get("data") or {}).get("path") for r in runs]
    for path in candidates:
        if isinstance(path, str | Path) and "${" not in str(path) and Path(path).is_file():
            conversations, _ = load_locomo(path)
            wanted = set(samples)
            return extract.turn_texts([c for c in conversations if c.sample_id in wanted]), str(path)
    return {}, None


def build_site(roots: list[str | Path], out: str | Path, data: str | Path | None = None,
               n_resamples: int = N_RESAMPLES, seed: int = 0, judges: list[str | Path] = ()) -> Path:
    """Write the viewer of the runs below `roots` into `out`; returns out/index.html. `judges`:
    folders `scgmem-report judge --out` wrote for one of these runs (a run's own labels are read anyway).

    Raises NoRunsError (no run), StoredFileError (a run file that is not what scgmem-run writes),
    DataError (the data file), ValueError (runs scoring different categories)."""
    runs = collect_all(roots)  # every run below each root (a run directory or a sweep), each once
    for folder in judges:
        extract.attach_judge(runs, Path(folder))
    out = _prepare(Path(out))
    samples = sorted({r["sample_id"] for run in runs for r in run.records})
    conv_index = {s: i for i, s in enumerate(samples)}
    turns, data_path = _turns(runs, data, samples)
    index = {"runs": [], "rows": [], "tables": [], "samples": samples, "columns": list(extract.ROW),
             "data": data_path, "turns": [s in turns for s in samples], "n_resamples": n_resamples, "seed": seed}
    for i, run in enumerate(runs):
        summary = extract.summary_view(run, i)
        index["runs"].append(summary)
        index["rows"].append(extract.question_rows(run, conv_index))
        index["tables"].append(stats.category_table(run, n_resamples, seed))
        for sample in sorted({r["sample_id"] for r in run.records}):
            details = extract.conversation_details(run, sample, summary["settings"])
            write_output(out / "data" / f"r{i}_c{conv_index[sample]}.js", _script(f"r{i}_c{conv_index[sample]}", details))
    index["pairs"] = stats.pairs(runs, n_resamples, seed)
    index["paired_all"] = len(runs) <= stats.MAX_PAIRED_RUNS
    for sample, texts in turns.items():
        write_output(out / "data" / f"t{conv_index[sample]}.js", _script(f"t{conv_index[sample]}", texts))
    write_output(out / "data" / "index.js", _script("index", index))
    assets = resources.files("scgmem.report.view") / "assets"
    for name in ASSETS:
        write_output(out / name, (assets / name).read_text(encoding="utf-8"))
    log.info("%d runs, %d questions, %d conversations -> %s", len(runs), sum(len(r.records) for r in runs),
             len(samples), out)
    return out / "index.html"


CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'none'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def serve(folder: str | Path, port: int) -> None:
    """Serve `folder` on 127.0.0.1:`port` until interrupted, with the page's CSP as a header too."""
    import functools
    import http.server

    class Handler(http.server.SimpleHTTPRequestHandler):
        def end_headers(self):
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            super().end_headers()

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            log.debug(format, *args)

    handler = functools.partial(Handler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving {folder} on http://127.0.0.1:{port}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
