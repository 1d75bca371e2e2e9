"""Issue 42, reports: model names, labels and notes are text from configs, data and model outputs.
In Markdown a newline in them cannot start a heading or a new block (the category-5 heading, the
paired-bootstrap heading and the notes were written raw); in CSV a text cell that a spreadsheet
would evaluate (=, +, -, @, tab, CR first) is written with a leading apostrophe; numbers unchanged
(scgmem/report/writers.py)."""
from __future__ import annotations

import csv

import pytest

from scgmem.report.tables import Block, Row, Table
from scgmem.report.writers import csv_cell, to_markdown, write_table

EVIL_MODEL = "smollm\n## Injected heading\n<script>alert(1)</script>"
EVIL_NOTE = "a note\n# Another injected heading\n| fake | table |"


def evil_table() -> Table:
    cat5 = {"average_1_4": {"f1": 10.0, "bleu1": 5.0, "categories": [1, 2]}, "average_1_4_ci": {"f1": (8.0, 12.0)},
            "category5": {"n": 3, "refusal_rate": 0.5, "f1_share": {}}}
    row = Row(key="=HYPERLINK(\"http://x\")", label="+cmd|' /C calc'!A0\n## row heading", n=3, run_dir="@evil",
              cells={}, deviations=["dtype -2+3"], cat5=cat5)
    paired = [{"category": "average", "metric": "f1", "a": "scgmem", "b": "=1+1", "n": 3, "unmatched": 0,
               "diff": -1.5, "ci_low": -2.0, "ci_high": 0.5, "p_value": 0.4}]
    return Table(name="table1", title="Table 1\n## injected title", categories=["multi_hop"],
                 blocks=[Block(model=EVIL_MODEL, paper_model="llama\n## x", rows=[row], paired=paired)],
                 notes=[EVIL_NOTE])


def test_markdown_has_no_injected_heading_or_html():
    text = to_markdown(evil_table())
    assert not any(line.lstrip().startswith(("## Injected", "# Another", "## row", "## injected", "## x"))
                   for line in text.splitlines())
    assert "<script>" not in text
    assert any(line.startswith("Category 5 apart (smollm ## Injected heading") for line in text.splitlines())
    assert any(line.startswith("Paired bootstrap (smollm ## Injected heading") for line in text.splitlines())
    assert "- a note # Another injected heading | fake | table |" in text.splitlines()


@pytest.mark.parametrize("value, written", [("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-2+3", "'-2+3"),
                                            ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"),
                                            ("plain", "plain"), ("", ""), (-1.5, -1.5), (3, 3), (None, None)])
def test_csv_cells(value, written):
    assert csv_cell(value) == written


def test_written_csv_files_start_no_text_cell_with_a_formula(tmp_path):
    paths = write_table(evil_table(), tmp_path)
    for path in (p for p in paths if p.suffix == ".csv"):
        for row in csv.reader(path.open(newline="", encoding="utf-8")):
            for cell in row:
                if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                    float(cell)  # only numbers may start so (-1.5)


def test_plain_labels_are_written_as_before():
    table = evil_table()
    table.blocks[0].model, table.blocks[0].paper_model, table.notes = "smollm2-135m", "llama3.2-1b", ["Runs: x."]
    table.blocks[0].rows[0].label, table.title = "SCG-Mem", "Table 1"
    text = to_markdown(table)
    assert "## Table 1\n" in text and "### smollm2-135m — paper numbers: llama3.2-1b" in text
    assert "Category 5 apart (smollm2-135m); see the legend below." in text and "- Runs: x." in text


def test_figure_csvs_escape_text_cells_too(tmp_path):
    """The figures' CSVs (fig3, fig4, cost_vs_f1) carry run labels: a label a spreadsheet would
    evaluate gets its apostrophe; numbers, negative ones included, stay numbers."""
    import csv

    from scgmem.report.figures import _write_csv

    path = _write_csv(tmp_path / "fig.csv", [{"label": "=HYPERLINK(\"x\")", "f1": -1.5}])
    (row,) = list(csv.DictReader(open(path, encoding="utf-8")))
    assert row == {"label": "'=HYPERLINK(\"x\")", "f1": "-1.5"}
