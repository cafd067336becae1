"""docs/architecture.md stays true to the tree: its file list names every module of bertkit/
once (the packages' `__init__.py` aside) and nothing else, and every path it mentions exists.
A failure names each file that is missing, absent or listed twice, so the fix is one edit."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "bertkit"
DOC = REPO / "docs" / "architecture.md"


def tree_block(text: str) -> list[str]:
    """The lines of the fenced block that starts with `bertkit/`."""
    for block in re.findall(r"```\n(.*?)```", text, flags=re.S):
        if block.startswith("bertkit/\n"):
            return block.splitlines()[1:]
    raise AssertionError("docs/architecture.md: no ``` block starting with bertkit/")


def expand(token: str) -> list[str]:
    """`tasks/{classify,pair}.py` -> `tasks/classify.py`, `tasks/pair.py`."""
    match = re.fullmatch(r"(.*)\{(.*?)\}(.*)", token)
    if match is None:
        return [token]
    head, alternatives, tail = match.groups()
    return [name for alt in alternatives.split(",") for name in expand(head + alt + tail)]


def listed_files(lines: list[str]) -> list[str]:
    """The modules a tree block lists, relative to bertkit/, in order, repeats kept. A line at
    the first indentation holds the top-level modules or starts a folder (`model/  a.py ...`);
    a line indented further goes on with the folder above it."""
    found: list[str] = []
    top = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    folder = ""
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if len(line) - len(line.lstrip()) == top:
            folder = tokens.pop(0) if tokens[0].endswith("/") else ""
        found += [folder + name for token in tokens for name in expand(token)
                  if name.endswith(".py")]
    return found


def package_files() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                  if p.name != "__init__.py")


def drift(listed: list[str], actual: list[str]) -> list[str]:
    """What is wrong with a listing, one line per kind of mistake; empty when it is right."""
    counts = Counter(listed)
    problems = []
    if missing := sorted(set(actual) - set(listed)):
        problems.append("missing (in bertkit/, not in the list): " + ", ".join(missing))
    if extra := sorted(set(listed) - set(actual)):
        problems.append("listed but not in bertkit/: " + ", ".join(extra))
    if twice := sorted(name for name, n in counts.items() if n > 1):
        problems.append("listed more than once: " + ", ".join(twice))
    return problems


def test_the_file_list_is_the_tree():
    problems = drift(listed_files(tree_block(DOC.read_text(encoding="utf-8"))), package_files())
    assert not problems, "docs/architecture.md's file list has drifted:\n  " + \
        "\n  ".join(problems)


def mentioned_paths(text: str) -> set[str]:
    """Every `dir/file.py` and `dir/subdir/` in backticks: relative to bertkit/ unless it starts
    with bertkit/, tests/, bench/ or docs/ (a lone `dir/` may be a package's, so it is left
    out)."""
    return set(re.findall(r"`((?:[\w.]+/)+\w+\.py|[\w.]+/(?:[\w.]+/)+)`", text))


def test_every_path_it_mentions_exists():
    absent = sorted(path for path in mentioned_paths(DOC.read_text(encoding="utf-8"))
                    if not (REPO / path if path.split("/")[0] in {"bertkit", "tests", "bench",
                                                                  "docs"}
                            else PACKAGE / path).exists())
    assert not absent, "docs/architecture.md mentions paths that do not exist: " + \
        ", ".join(absent)


@pytest.mark.parametrize("listed, problem", [
    (["a.py", "m/b.py", "m/c.py"], None),
    (["a.py", "m/b.py"], "missing (in bertkit/, not in the list): m/c.py"),
    (["a.py", "m/b.py", "m/c.py", "m/d.py"], "listed but not in bertkit/: m/d.py"),
    (["a.py", "m/b.py", "m/c.py", "a.py"], "listed more than once: a.py"),
])
def test_drift_names_each_file(listed, problem):
    assert drift(listed, ["a.py", "m/b.py", "m/c.py"]) == ([problem] if problem else [])


def test_the_tree_is_read_as_written():
    lines = ["  files.py  config.py", "  model/   encoder.py  heads.py",
             "           generate.py", "  finetuning/  task.py  tasks/{classify,qa}.py",
             "  cli/   main.py"]
    assert listed_files(lines) == [
        "files.py", "config.py", "model/encoder.py", "model/heads.py", "model/generate.py",
        "finetuning/task.py", "finetuning/tasks/classify.py", "finetuning/tasks/qa.py",
        "cli/main.py"]
