"""The commands of the README and of docs/ parse with the real command line, and the README's
Python imports resolve."""
from __future__ import annotations

import ast
import importlib
import re
import shlex
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


def test_the_readme_shows_every_command():
    shown = {shlex.split(c)[1] for c in commands()}
    parser = build_parser()
    available = set(parser._subparsers._group_actions[0].choices)
    assert available <= shown | {"pretrain"}, available - shown  # pretrain: shown as a synopsis


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


def test_readme_python_imports_resolve():
    for block in blocks("python"):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("bertkit"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
