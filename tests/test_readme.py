"""The commands of the README and of docs/ parse with the real command line, every command
is shown in one of them, their Python imports resolve, and every link between the README and
docs/ finds its file and heading (on GitHub; tests/test_docs.py builds the site)."""
from __future__ import annotations

import ast
import importlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from bertkit.cli.main import build_parser

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = {p.name: p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))}


def blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def commands(text: str = README) -> list[str]:
    found = []
    for block in blocks("(?:bash|sh)", text):
        text = re.sub(r"\\\n\s*", " ", block)  # continuation lines
        for line in text.splitlines():
            line = line.split(" #")[0].strip()
            line = re.sub(r"^(?:\w+=\S+ )*(?:\.venv/bin/)?", "", line)  # env, the venv's path
            if not line.startswith("bertkit ") or "$obj" in line:
                continue
            line = re.sub(r"\[[^\[\]]*\]", "", line)  # optional parts
            if any(c in line for c in "(|") or "..." in line:
                continue  # a synopsis of alternatives, not a command
            found.append(line.replace("$M", "model_dir"))
    return found


def test_the_readme_and_docs_show_every_command():
    shown = {shlex.split(c)[1] for text in [README, *DOCS.values()] for c in commands(text)}
    parser = build_parser()
    available = set(parser._subparsers._group_actions[0].choices)
    assert available <= shown, available - shown


def test_the_readme_shows_a_command_of_each_path():
    shown = {shlex.split(c)[1] for c in commands()}
    assert {"tokenizer", "pretrain", "embed", "finetune", "road", "serve"} <= shown


@pytest.mark.parametrize("command", commands())
def test_readme_command_parses(command):
    args = build_parser().parse_args(shlex.split(command)[1:])
    if args.config is None:  # the options it builds are valid (no file to read)
        assert len(args.command.read(args)) == len(args.command.options)


@pytest.mark.parametrize("command", [(name, c) for name, text in DOCS.items()
                                     for c in commands(text)], ids=lambda c: c[1][:60])
def test_docs_command_parses(command):
    name, line = command
    try:
        args = build_parser().parse_args(shlex.split(line)[1:])
    except SystemExit:
        pytest.fail(f"docs/{name}: {line}")
    if args.config is None:
        assert len(args.command.read(args)) == len(args.command.options)


@pytest.mark.parametrize("name", ["README.md", *DOCS])
def test_python_imports_resolve(name):
    text = README if name == "README.md" else DOCS[name]
    for block in blocks("python", text):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("bertkit"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{name}: {node.module}.{alias.name}"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but - and _ dropped, spaces
    to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> Iterator[str]:
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S),
                              flags=re.M):
        slug = _slug(heading)
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def _links() -> list[tuple[Path, str]]:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        body = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        found += [(page, target) for target in re.findall(r"\]\(([^)\s]+)\)", body)
                  if not re.match(r"[a-z]+:", target)
                  and not target.startswith("reference/")]  # the site's generated pages
    return found


INSIDE_WORDS = ("the issue", "the seeds", "source documents", "runs/d60-", "../shared")
"""Words from inside the project that a user cannot follow: the tracker's issues, the texts the
project started from by their working names, the development runs' folder names and the
development machine's data folder (name the public data set instead: docs/data.md)."""


def inside_words(text: str, words=INSIDE_WORDS) -> list[str]:
    """'LINE: word' for each of `words` found in `text`, case aside."""
    return [f"{n}: {word}" for n, line in enumerate(text.splitlines(), 1)
            for word in words if word in line.lower()]


def test_inside_words_are_found_in_any_case():
    assert inside_words("ok\nAs The Issue's table\nsee ../shared/data/x") == \
        ["2: the issue", "3: ../shared"]
    assert inside_words("the issues of a tracker are not the seed's") == ["1: the issue"]
    assert inside_words("issue 43, seeds 0 / 1 / 2, runs/d60") == []


@pytest.mark.parametrize("name", ["README.md", *DOCS])
def test_the_documentation_speaks_to_users(name):
    text = README if name == "README.md" else DOCS[name]
    assert not inside_words(text), f"{name}: {inside_words(text)}"


def test_help_and_docstrings_speak_to_users():
    """The help of every command and the API reference come from the package's docstrings."""
    words = [w for w in INSIDE_WORDS if w != "the issue"]  # code may say "the issue is ..."
    found = {str(path.relative_to(REPO)): inside_words(path.read_text(encoding="utf-8"), words)
             for path in sorted((REPO / "bertkit").rglob("*.py"))}
    assert not {path: hits for path, hits in found.items() if hits}


def test_slugs_are_githubs():
    assert _slug("Two hours of today's default") == "two-hours-of-todays-default"
    assert _slug("Objectives at the same wall time (Austen + Bible)") == \
        "objectives-at-the-same-wall-time-austen--bible"
    assert list(_anchors("# A\n## A\n```\n# not a heading\n```\n")) == ["a", "a-1"]


@pytest.mark.parametrize("page, target", _links(),
                         ids=lambda x: x.name if isinstance(x, Path) else x[:60])
def test_link_finds_its_file_and_heading(page, target):
    path, _, anchor = target.partition("#")
    dest = (page.parent / path) if path else page
    assert dest.exists(), f"{page.name}: {target}: no such file"
    if anchor and dest.suffix == ".md":
        assert anchor in set(_anchors(dest.read_text(encoding="utf-8"))), \
            f"{page.name}: {target}: no such heading"
