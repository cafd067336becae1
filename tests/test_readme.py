"""The README's commands parse with the real command line, and its Python imports resolve."""
from __future__ import annotations

import ast
import importlib
import re
import shlex
from pathlib import Path

import pytest

from bertkit.cli.main import build_parser

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def commands() -> list[str]:
    found = []
    for block in blocks("bash"):
        text = re.sub(r"\\\n\s*", " ", block)  # continuation lines
        for line in text.splitlines():
            line = line.split(" #")[0].strip()
            if not line.startswith("bertkit "):
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


def test_readme_python_imports_resolve():
    for block in blocks("python"):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("bertkit"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
