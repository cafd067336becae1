"""pretrain's options go one way: `PretrainOptions` is read by the plan that makes the run of it
(and defined beside it), by the command line that fills it, and nowhere else in the library."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from bertkit.cli.main import main

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


OPTIONS_MODULE = "bertkit.pretraining.options"
"""Where the options' own methods are: the data itself, not a room it passes through."""


def _modules_holding_the_options(argv: list[str], calls: int) -> list[str]:
    """The library module of each of the first `calls` calls whose frame holds the run's
    options (a PretrainOptions among its arguments), in the order the run makes them."""
    seen: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or len(seen) >= calls:
            return
        module = frame.f_globals.get("__name__", "")
        if module.startswith("bertkit.") and module != OPTIONS_MODULE and any(
                type(v).__name__ == "PretrainOptions" for v in frame.f_locals.values()):
            seen.append(module)

    sys.setprofile(profile)
    try:
        assert main(argv) == 0
    finally:
        sys.setprofile(None)
    return seen


def _returns(modules: list[str]) -> int:
    """How often the sequence comes back to a module it had left."""
    visits = [m for i, m in enumerate(modules) if i == 0 or m != modules[i - 1]]
    return sum(m in visits[:i] for i, m in enumerate(visits))


def test_followed_as_data_the_options_go_one_way(prepared, tmp_path, capsys):
    """Run as a user runs it, the options pass from the command line to the recipe to the plan
    and stop there: the plan made of them is what the run reads."""
    modules = _modules_holding_the_options(
        ["pretrain", "--data", str(prepared), "--out", str(tmp_path / "run"), "--preset",
         "tiny", "--seq-len", "32", "--batch-size", "4", "--max-steps", "1",
         "--precision", "fp32"], calls=400)
    capsys.readouterr()
    assert modules[0].startswith("bertkit.cli.")  # read from the command line
    assert "bertkit.pretraining.plan" in modules
    outside = {m for m in modules if not m.startswith("bertkit.cli.")} - {
        "bertkit.pretraining.recipe", "bertkit.pretraining.plan"}
    assert not outside, outside
    assert _returns(modules) <= 5, modules


def test_returns_are_counted():
    assert _returns(["a", "a", "b", "c", "b", "a", "a"]) == 2
