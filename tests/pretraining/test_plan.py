"""pretrain's options go one way: `PretrainOptions` is read by the plan that makes the run of it
(and defined beside it), by the command line that fills it, and nowhere else in the library."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "bertkit"
READERS = {"pretraining/options.py", "pretraining/plan.py"}
"""Where PretrainOptions is defined and read (cli/ fills it from the command line)."""
PASSERS = {"pretraining/recipe.py": "pretrain", "demo.py": None}
"""Modules that name it without reading it: `pretrain` hands its options to the plan (and
re-exports the class, the API's name), `bertkit demo` builds one for its pretraining step."""
API_MAP = "__init__.py"
"""The package's lazy name -> module table, a string key."""


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("cli/") or rel in READERS or rel == API_MAP:
            continue
        yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _names(tree: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and n.id == "PretrainOptions")
               or (isinstance(n, ast.alias) and n.name == "PretrainOptions")
               or (isinstance(n, ast.Attribute) and n.attr == "PretrainOptions")
               or (isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and "PretrainOptions" in n.value and "\n" not in n.value
                   and len(n.value) < 60)  # a string annotation, not a docstring
               for n in ast.walk(tree))


def test_no_module_but_the_plan_and_the_cli_reads_pretrain_options():
    naming = sorted(rel for rel, tree in _modules() if _names(tree))
    assert naming == sorted(PASSERS), naming


def test_pretrain_hands_its_options_to_the_plan_unread():
    tree = dict(_modules())["pretraining/recipe.py"]
    pretrain = next(n for n in ast.walk(tree)
                    if isinstance(n, ast.FunctionDef) and n.name == PASSERS["pretraining/recipe.py"])
    param = pretrain.args.args[0].arg
    uses = [n for n in ast.walk(pretrain) if isinstance(n, ast.Name) and n.id == param]
    calls = [n for n in ast.walk(pretrain) if isinstance(n, ast.Call)
             and any(isinstance(a, ast.Name) and a.id == param for a in n.args)]
    assert len(uses) == 1 and len(calls) == 1 and calls[0].func.id == "launch_of"
    # nothing reads an attribute of it
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name) and n.value.id == param]


def test_the_check_has_teeth(tmp_path):
    """A module that reads an option is found."""
    tree = ast.parse("from bertkit.pretraining.options import PretrainOptions\n"
                     "def f(o: 'PretrainOptions'):\n    return o.seq_len\n")
    assert _names(tree)
