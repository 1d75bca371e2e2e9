"""Every command in the code blocks of docs/reproduce.md and README.md works as written, as far as
it can be checked without running it:

- `scgmem-run` / `python -m scgmem.run`: the runner's own override check passes and the overrides
  compose against configs/ (Hydra's compose API, as tests/test_configs.py; for a `-m` sweep each
  listed value is composed in turn);
- `make <target> VAR=...`: `make -n` accepts it, and every `scgmem-run` line it would run composes;
- `scgmem-report ...`: the subcommand and its flags parse;
- `python scripts/<x>.py`, `scripts/<x>.sh`: the file exists.

A misspelt override, option, target or flag fails (tested below)."""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from scgmem.harness.cli_checks import check_overrides
from scgmem.harness.run import CONFIG_DIR
from scgmem.report.cli import parser as report_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "docs" / "reproduce.md", ROOT / "README.md")
RUNNERS = ("scgmem-run", "scgmem.run")
PLACEHOLDER = re.compile(r"<[^<>]*>")  # <dir>, <sweep A>: a value the user fills in
FENCE = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.S | re.M)  # shell blocks, not file trees
REDIRECT = re.compile(r"\s\d*(?:>>?|<)&?\s*\S+")  # > a.log, 2>&1, < in
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


class CommandError(AssertionError):
    """A documented command that would fail as written."""


def code_lines(text: str) -> list[str]:
    """The shell lines of the shell code blocks of `text`, continuations joined, and the shell
    variables a block sets (`CAPS='...'` on a line of its own) expanded in its later lines."""
    lines = []
    for block in FENCE.findall(text):
        variables: dict[str, str] = {}
        for line in block.replace("\\\n", " ").splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                words = []  # reported by split_commands
            assigned = ASSIGNMENT.match(words[0]) if len(words) == 1 else None
            if assigned:  # VAR=value alone on a line: a shell variable of the block
                variables[assigned[1]] = assigned[2]
                continue
            for name, value in variables.items():
                line = re.sub(r'"?\$\{?' + name + r'\}?"?', lambda _: shlex.quote(value), line)
            lines.append(line)
    return lines


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line (split at | ; && ||, comments dropped), with leading
    VAR=value assignments, `nohup`, `env` and redirections removed; placeholders filled."""
    lexer = shlex.shlex(REDIRECT.sub(" ", PLACEHOLDER.sub("X", line)), posix=True, punctuation_chars="|;&")
    lexer.whitespace_split, lexer.commenters = True, "#"
    commands, current = [], []
    try:
        tokens = list(lexer)
    except ValueError as e:  # an unclosed quote: the shell would not run it either
        raise CommandError(f"{line.strip()}: {e}") from None
    for token in tokens:
        if set(token) <= set("|;&"):
            commands.append(current)
            current = []
        elif token == "...":
            continue  # "any further overrides"
        else:
            current.append(token)
    commands.append(current)
    out = []
    for words in commands:
        while words and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]) or words[0] in ("nohup", "env")):
            words = words[1:]
        if words:
            out.append(words)
    return out


def _compose(overrides: list[str]) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        compose(config_name="config", overrides=overrides, return_hydra_config=True)


def check_run(args: list[str]) -> None:
    """Raise CommandError unless the overrides of a scgmem-run command compose."""
    overrides, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--cfg", "-c", "--package", "-p"):
            skip = True
        elif not arg.startswith("-"):
            overrides.append(arg)
    problem = check_overrides(overrides, CONFIG_DIR)
    if problem:
        raise CommandError(problem)
    parsed = OverridesParser.create().parse_overrides(overrides)
    # One composition per value of each sweep, the other sweeps at their first value.
    first = [o.input_line if not o.is_sweep_override() else f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
             for o in parsed]
    variants = [first]
    for i, o in enumerate(parsed):
        if o.is_sweep_override():
            variants += [first[:i] + [f"{o.get_key_element()}={v}"] + first[i + 1:] for v in o.sweep_string_iterator()]
    for variant in variants:
        try:
            _compose(variant)
        except Exception as e:  # Hydra's composition errors have several classes
            raise CommandError(f"{' '.join(variant)}: {type(e).__name__}: {e}") from None


def check_make(args: list[str]) -> None:
    """Raise CommandError unless `make -n` accepts the target and its scgmem-run lines compose."""
    proc = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise CommandError(f"make -n {' '.join(args)}: {proc.stderr.strip()}")
    for line in proc.stdout.splitlines():
        for words in split_commands(line):
            if words[0].endswith("scgmem-run"):
                check_run(words[1:])
            elif words[0].endswith("scgmem-report"):
                check_report(words[1:])


def check_report(args: list[str]) -> None:
    try:
        report_parser().parse_args(args)
    except SystemExit:
        raise CommandError(f"scgmem-report {' '.join(args)}: does not parse") from None


def check(words: list[str]) -> bool:
    """Check one command; False when it is of none of the kinds checked here."""
    program = words[0]
    if program == "unparsable":
        raise CommandError(words[1])
    if program.endswith("scgmem-run"):
        check_run(words[1:])
    elif re.fullmatch(r"(\S*/)?python3?", program) and words[1:3] == ["-m", "scgmem.run"]:
        check_run(words[3:])
    elif program == "make":
        check_make(words[1:])
    elif program.endswith("scgmem-report") or (re.fullmatch(r"(\S*/)?python3?", program)
                                              and words[1:3] == ["-m", "scgmem.report.cli"]):
        check_report(words[1:] if program.endswith("scgmem-report") else words[3:])
    elif re.fullmatch(r"(\S*/)?python3?", program) and len(words) > 1 and words[1].startswith("scripts/"):
        if not (ROOT / words[1]).is_file():
            raise CommandError(f"{words[1]}: no such script")
    elif program.startswith("scripts/"):
        if not (ROOT / program).is_file():
            raise CommandError(f"{program}: no such script")
    else:
        return False
    return True


def documented() -> list[tuple[str, list[str]]]:
    out = []
    for doc in DOCS:
        for line in code_lines(doc.read_text(encoding="utf-8")):
            where = f"{doc.name}: {line.strip()[:100]}"
            try:
                out += [(where, words) for words in split_commands(line)]
            except CommandError as e:
                out.append((where, ["unparsable", str(e)]))  # fails in the test below, named
    return out


COMMANDS = documented()


@pytest.mark.parametrize("where, words", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_works_as_written(where, words):
    check(words)


def test_the_docs_commands_are_found():
    programs = [w[0] for _, w in COMMANDS]
    kinds = {"run": sum(p.endswith("scgmem-run") for p in programs), "make": programs.count("make"),
             "report": sum(p.endswith("scgmem-report") for p in programs)}
    assert kinds["run"] >= 15 and kinds["make"] >= 10 and kinds["report"] >= 5, kinds


@pytest.mark.parametrize("words, needle", [
    (["scgmem-run", "-m", "+experiment=table1", "model.max_batch_token=1"], "max_batch_token"),
    (["scgmem-run", "+experment=table1"], "experment"),
    (["scgmem-run", "model=qwen2.5-7b"], "unknown model"),
    (["scgmem-run", "-m", "+experiment=table1", "method=amem,scgmen"], "scgmen"),
    (["scgmem-run", "+launcher=gpu_shared", "hydra.launcher.n_job=4"], "n_job"),
    (["make", "reproduce-tabel1"], "reproduce-tabel1"),
    (["make", "reproduce-table1", "SLICE=data.sample=[conv-26]"], "data.sample"),
    (["scgmem-report", "table1", "--run", "x", "--wandbb"], "does not parse"),
])
def test_a_misspelt_command_fails(words, needle):
    with pytest.raises(CommandError, match=re.escape(needle)):
        check(words)


def test_shell_lines_are_split_into_commands():
    line = 'CUDA_VISIBLE_DEVICES=0 nohup scgmem-run -m model=a "x=[1, 2]" hydra.sweep.dir=<dir> > a.log 2>&1 &'
    assert split_commands(line) == [["scgmem-run", "-m", "model=a", "x=[1, 2]", "hydra.sweep.dir=X"]]
    assert split_commands("make a && scgmem-report b  # c") == [["make", "a"], ["scgmem-report", "b"]]
