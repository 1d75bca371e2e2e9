"""The layout's seams: methods (scgmem/core, baselines) stand on the contract package scgmem.api
and never reach into the loader or the runner, so a method can be read, tested and reused
without LoCoMo's file format or the harness."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
METHOD_DIRS = ("scgmem/core", "baselines")
# What a method may not import: the dataset loader, the runner and scoring, the report.
FORBIDDEN = ("scgmem.data", "scgmem.harness", "scgmem.scoring", "scgmem.report", "scgmem.run")


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, function-local ones included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # `from scgmem import data` names the package in the alias
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def forbidden_imports(path: Path) -> list[str]:
    bad_lines = {line: module for line, module in reversed(imported_modules(path.read_text(encoding="utf-8")))
                 if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN)}
    return [f"{path.relative_to(ROOT)}:{line} imports {module}" for line, module in sorted(bad_lines.items())]


def test_the_walker_sees_every_import_form():
    source = ("import scgmem.data.locomo\nfrom scgmem.data.locomo import load_locomo\nfrom scgmem import data\n"
              "def f():\n    from scgmem.harness.run import main\n")
    modules = {module for _, module in imported_modules(source)}
    assert {"scgmem.data.locomo", "scgmem.data", "scgmem.harness.run"} <= modules


@pytest.mark.parametrize("folder", METHOD_DIRS)
def test_methods_import_neither_the_loader_nor_the_harness(folder):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}"
    problems = [p for f in files for p in forbidden_imports(f)]
    assert not problems, "\n".join(problems)


def import_graph(*folders: str) -> dict[str, set[str]]:
    """{module: the modules of `folders` it imports} over every file of them (default: scgmem/),
    function-local imports included: `from a.b import c` points at module a.b.c when there is
    one, else at a.b. baselines/ is named as installed, scgmem.baselines."""
    files = {}
    for folder in folders or ("scgmem",):
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            parts = ("scgmem", *parts) if parts[0] == "baselines" else parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        targets = {resolve(name) for _, name in imported_modules(path.read_text(encoding="utf-8"))}
        # a module's own parent packages are imported before it anyway: a package that re-exports
        # its submodule (`from pkg.method import X` in pkg/__init__.py) is no circle
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted: every circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_the_circle_finder_finds_a_two_file_circle_and_a_longer_one():
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "a"}, "f": {"a"}}
    assert sorted(import_circles(graph)) == [["a", "b"], ["c", "d", "e"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
    """No two modules of scgmem/ import each other, directly or through others (a function-local
    import counts too: it hides the circle, it does not break it)."""
    graph = import_graph()
    assert "scgmem.harness.run" in graph and graph["scgmem.harness.run"]
    circles = import_circles(graph)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


CODE_FOLDERS = ("scgmem", "baselines", "scripts", "experiments")


def test_no_import_circle_across_the_code_folders():
    """No circle through scripts/ and experiments/ either (a bench script importing another that
    imports it back), nor between them and the package."""
    graph = import_graph(*CODE_FOLDERS)
    assert "scgmem.baselines" in graph and any(m.startswith("scripts.") for m in graph)
    circles = import_circles(graph)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


# Which parts may not import which: the served backend stands on the neutral floor (scgmem/llm/*.py),
# never on the transformers backend; nothing in llm/ imports the method core, and the core sees the
# models only through the floor (the protocol, the constraint as data, the key-list rule).
LLM_FORBIDDEN = {"scgmem/llm/served": ("scgmem.llm.local",), "scgmem/llm": ("scgmem.core",),
                 "scgmem/core": ("scgmem.llm.local", "scgmem.llm.served")}


@pytest.mark.parametrize("folder, forbidden", sorted(LLM_FORBIDDEN.items()))
def test_the_llm_layers_point_one_way(folder, forbidden):
    problems = [f"{path.relative_to(ROOT)}:{line} imports {module}" for path in sorted((ROOT / folder).rglob("*.py"))
                for line, module in imported_modules(path.read_text(encoding="utf-8"))
                if any(module == bad or module.startswith(bad + ".") for bad in forbidden)]
    assert not problems, "\n".join(problems)


# The library stands on itself: test doubles (and the pipeline built on them) are imported only by
# tests, benchmarks and experiments; an analysis (experiments/) stands on the library, never on a
# script's internals.
DOUBLES = ("scgmem.llm.doubles", "scgmem.testing")
DOUBLES_HOMES = ("scgmem/llm/doubles", "scgmem/testing")


def _imports_of(folder: str, forbidden: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {module}" for path in sorted((ROOT / folder).rglob("*.py"))
            if not any(str(path.relative_to(ROOT)).startswith(home + "/") for home in skip)
            for line, module in imported_modules(path.read_text(encoding="utf-8"))
            if any(module == bad or module.startswith(bad + ".") for bad in forbidden)]


@pytest.mark.parametrize("folder", ["scgmem", "baselines"])
def test_no_library_module_imports_the_test_doubles(folder):
    problems = _imports_of(folder, DOUBLES, skip=DOUBLES_HOMES)
    assert not problems, "\n".join(problems)


def test_experiments_import_no_scripts():
    problems = _imports_of("experiments", ("scripts",))
    assert not problems, "\n".join(problems)


def test_the_boundary_walker_sees_a_planted_import(tmp_path, monkeypatch):
    """The two rules above can fail: a planted library module importing the doubles is found."""
    name = "planted.py"  # a path built, not written out: the docs-reference check reads paths in tests
    planted = tmp_path / "scgmem" / "harness" / name
    planted.parent.mkdir(parents=True)
    planted.write_text("def f():\n    from scgmem.testing.scripted import fake_pipeline\n", encoding="utf-8")
    (tmp_path / "scgmem" / "testing").mkdir()
    (tmp_path / "scgmem" / "testing" / "ok.py").write_text("import scgmem.llm.doubles.fake\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = _imports_of("scgmem", DOUBLES, skip=DOUBLES_HOMES)
    assert found and all(p.startswith(f"scgmem/harness/{name}:2 imports scgmem.testing.scripted") for p in found)


def test_an_engine_dialect_imports_neither_torch_nor_transformers():
    """`scgmem.llm` loads its backends lazily: the dialects, the registry and the grammar compiler
    are plain Python, importable where torch is not installed."""
    import subprocess
    import sys

    probe = ("import sys, scgmem.llm.served.engines.dialect, scgmem.llm.served.engines, scgmem.llm.served.lark_trie; "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_method_core_imports_no_torch():
    """scgmem/core reads like the paper's Section 3 and runs on any backend: importing it loads
    neither torch nor transformers (the trie builds its mask tensors only when the local backend asks)."""
    import subprocess
    import sys

    probe = ("import sys, scgmem.core.decoding, scgmem.core.method, scgmem.core.recall; "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_llm_interface_depends_on_no_implementation():
    """scgmem/llm/protocol.py is the interface every backend implements (the local one, the
    scripted fake, a server client): it may import no backend, so no cycle runs through it."""
    imports = [m for _, m in imported_modules((ROOT / "scgmem/llm/protocol.py").read_text(encoding="utf-8"))]
    # the constraint it names is data (scgmem/llm/constraint_spec.py), which imports nothing of ours
    assert not [m for m in imports if m.startswith("scgmem.") and not m.startswith("scgmem.llm.constraint_spec")], imports
    spec = [m for _, m in imported_modules((ROOT / "scgmem/llm/constraint_spec.py").read_text(encoding="utf-8"))]
    assert not [m for m in spec if m.startswith("scgmem.")], spec


def test_the_only_installed_top_level_package_is_scgmem(monkeypatch):
    """setup.py installs the top-level baselines/ folder as scgmem.baselines, never as a generic
    top-level `baselines` (a name other projects install too); every package folder is listed."""
    import runpy

    import setuptools

    seen = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: seen.update(kwargs))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    packages = set(seen["packages"])
    assert {p.split(".")[0] for p in packages} == {"scgmem"}
    assert seen["package_dir"] == {"scgmem.baselines": "baselines"}
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for folder in ("scgmem", "baselines")
               for init in (ROOT / folder).rglob("__init__.py")}
    as_installed = {"scgmem." + name if name.startswith("baselines") else name for name in on_disk}
    assert {"scgmem.baselines", "scgmem.baselines.memorybank", "scgmem.baselines.rag"} <= as_installed
    assert as_installed == packages, sorted(as_installed ^ packages)


def test_a_source_tree_imports_its_own_baselines_folder():
    """Without an install (PYTHONPATH=., as on the device machine) scgmem.baselines is the
    top-level folder beside scgmem/, the same files an install maps."""
    import scgmem.baselines

    assert Path(scgmem.baselines.__file__).resolve() == ROOT / "baselines" / "__init__.py"


def test_nothing_edits_sys_path():
    """Tools run as modules from the repository root (`python -m scripts.<name>`), so no file
    needs to put a folder on sys.path by hand."""
    edits = ("sys.path." + "insert", "sys.path." + "append")  # split, or this file would match itself
    hits = [f"{p.relative_to(ROOT)}" for d in ("scgmem", "baselines", "scripts", "experiments", "tests") for p in (ROOT / d).rglob("*.py")
            if any(edit in p.read_text(encoding="utf-8") for edit in edits)]
    assert not hits, hits


def test_every_script_is_wired_into_make():
    """scripts/ holds only the tools make runs (one-off analyses live in experiments/): each module
    is a make target's command, or a helper another wired script imports or runs."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    scripts = {p.stem: p.read_text(encoding="utf-8") for p in (ROOT / "scripts").glob("*.py") if p.stem != "__init__"}
    shell = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "scripts").glob("*.sh"))
    wired = {name for name in scripts if f"scripts.{name}" in makefile or f"scripts/{name}" in makefile}
    changed = True
    while changed:  # helpers of wired scripts, transitively
        used = {name for name in scripts for user in wired | {"_shell"}
                if name not in wired and (user == "_shell" and f"scripts.{name}" in shell and "device_check" in makefile
                                          or user != "_shell" and re.search(rf"\bscripts(\.{name}\b| import .*\b{name}\b)", scripts[user]))}
        changed = bool(used)
        wired |= used
    assert set(scripts) == wired, sorted(set(scripts) - wired)
