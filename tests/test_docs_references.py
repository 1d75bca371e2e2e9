"""Docstrings and configs point into docs/: every file, section and source key they name exists,
so a renamed section or a dropped source fails here instead of leaving a dead pointer."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("scgmem", "baselines", "scripts", "experiments", "configs", "tests")
METHODS = ROOT / "docs" / "methods.md"


def code_files() -> list[Path]:
    return [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*")) if p.suffix in (".py", ".yaml", ".sh")]


def methods_anchors() -> set[str]:
    """What a pointer may name in docs/methods.md: its headings' leading words and its bold terms."""
    text = METHODS.read_text()
    headings = {re.sub(r"\s*\(.*", "", h).strip() for h in re.findall(r"^## (.+)$", text, re.M)}
    return headings | set(re.findall(r"\*\*([^*]+?)\.?\*\*", text))


def test_every_docs_file_named_in_the_code_exists():
    missing = [f"{p.relative_to(ROOT)}: {name}" for p in code_files()
               for name in re.findall(r"\bdocs/[\w-]+\.md", p.read_text()) if not (ROOT / name).is_file()]
    assert not missing, missing


def test_every_methods_section_named_in_the_code_exists():
    anchors = methods_anchors()
    pointer = re.compile(r'docs/methods\.md[,;]?\s+(?:section\s+([A-Z][\w-]*(?: [a-z]+)?)|"([^"]+)")')
    missing = [f"{p.relative_to(ROOT)}: {a or b}" for p in code_files()
               for a, b in pointer.findall(p.read_text()) if (a or b) not in anchors]
    assert not missing, missing


def test_every_source_key_in_the_baselines_is_listed_in_methods_sources():
    sources = METHODS.read_text().split("## Sources", 1)[1]
    listed = set(re.findall(r"^- \[([A-Z]\d)\]", sources, re.M))
    used = {key for p in code_files() if "baselines" in p.relative_to(ROOT).parts or p.parent.name == "method"
            for key in re.findall(r"\[([A-Z]\d)\]", p.read_text())}
    assert used and used <= listed, sorted(used - listed)


def test_no_bare_markdown_name_points_nowhere():
    """A bare `<name>.md` written in code, configs or tests exists: under the root, under docs/, or it
    is one of the files the report writes (claims.md, table1.md, ...) or another repository's."""
    written = {"claims.md", "costs.md", "table1.md", "table2.md", "gold_comparison.md",
               "AUDIT_REPORT.md"}  # the last: github.com/dial481/locomo-audit's, cited by the audit loader
    bare = re.compile(r"(?<![\w./-])([A-Za-z][\w-]*\.md)\b")
    missing = [f"{p.relative_to(ROOT)}: {name}" for p in code_files() for name in bare.findall(p.read_text())
               if name not in written and not (ROOT / name).is_file() and not (ROOT / "docs" / name).is_file()]
    assert not missing, missing


def test_every_repository_path_named_exists():
    """A path into the repository written in code, configs, tests or the docs (`tests/harness/test_caps.py`,
    `configs/method/amem.yaml`) names a file that exists, so a moved file leaves no dead pointer."""
    named = re.compile(r"(?<![\w./-])((?:scgmem|baselines|scripts|experiments|configs|tests)/[\w/.-]*\w\.(?:py|yaml|sh|jsonl?))\b")
    pages = [*code_files(), ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md"))]
    missing = sorted({f"{p.relative_to(ROOT)}: {name}" for p in pages for name in named.findall(p.read_text())
                      if not (ROOT / name).exists()})
    assert not missing, missing


def test_markdown_links_resolve():
    """Relative links in README.md, docs/ and the results' READMEs name files that exist."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "results").rglob("README.md"))]
    link = re.compile(r"\]\(([^)\s]+)\)")
    broken = []
    for page in pages:
        for target in link.findall(page.read_text()):
            path = target.split("#", 1)[0]
            if path and not re.match(r"[a-z]+://", path) and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
