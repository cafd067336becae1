"""The shape of the package: no import cycles (annotations included), no room importing a room
on a floor above it, nothing in the library imports the command line, and importing any module
leaves the process as it was (no global state set at import)."""
from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import bertkit

PACKAGE = Path(bertkit.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """bertkit modules a module imports anywhere: at its top, inside a function (a cycle
    through a deferred import still ties two modules into one concept) or under
    `if TYPE_CHECKING:` (an annotation that needs a module above or around is a knot a reader
    meets all the same; a small Protocol beside the code says what it needs instead)."""
    found = set()
    for node in ast.walk(_parsed(path)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("bertkit"):
                found.add(name)
    return found


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """The bertkit modules each module imports, found once for all the tests here (a walk
    through the package takes a second)."""
    modules = _modules()
    return {m: frozenset(_imports(p, modules)) for m, p in modules.items()}


def test_no_import_cycles():
    graph = {m: found - {m} for m, found in _graph().items()}
    # a package imports its own children without a cycle only if they do not import it back
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


# The floors of the house, lowest first: a room imports rooms on its own floor or below. A room
# is a package (bertkit/NAME/) or a module at the top (bertkit/NAME.py).
FLOORS = (
    ("bertkit", "files", "temporaries", "runlock", "signals", "config", "runtime", "peaks",
     "progress", "figures"),
    ("text",),
    ("model",),
    ("training",),
    ("pretraining",),
    ("embeddings", "senses"),
    ("finetuning",),
    ("road", "export", "retrieval"),
    ("serve", "demo", "sample_data"),
    ("cli",),
)
FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}



def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _upward_imports() -> set[tuple[str, str]]:
    return {(m, n) for m, found in _graph().items() for n in found
            if FLOOR[_room(n)] > FLOOR[_room(m)]}


def test_every_room_has_a_floor():
    rooms = {_room(m) for m in _modules()}
    assert rooms <= set(FLOOR), sorted(rooms - set(FLOOR))


@pytest.mark.parametrize("room", [r for rooms in FLOORS for r in rooms])
def test_no_room_imports_a_room_above_it(room):
    found = {edge for edge in _upward_imports() if _room(edge[0]) == room}
    assert not found, sorted(found)


def test_the_library_never_imports_the_command_line():
    modules = _modules()
    for name, path in modules.items():
        if name.startswith("bertkit.cli"):
            continue
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("bertkit.cli"), f"{name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("bertkit.cli") for a in node.names), name


_PROBE = r"""
import json, sys, warnings
import torch
before = dict(showwarning=id(warnings.showwarning), formatwarning=id(warnings.formatwarning),
              filters=len(warnings.filters), threads=torch.get_num_threads(),
              rng=torch.get_rng_state().sum().item(), dtype=str(torch.get_default_dtype()),
              grad=torch.is_grad_enabled())
import importlib
for name in sys.argv[1:]:
    importlib.import_module(name)
after = dict(showwarning=id(warnings.showwarning), formatwarning=id(warnings.formatwarning),
             filters=len(warnings.filters), threads=torch.get_num_threads(),
             rng=torch.get_rng_state().sum().item(), dtype=str(torch.get_default_dtype()),
             grad=torch.is_grad_enabled())
backend = None
if "matplotlib" in sys.modules:
    import matplotlib
    backend = matplotlib.rcParams._get_backend_or_none()
print(json.dumps({"before": before, "after": after, "backend": backend}))
"""


def test_importing_every_module_leaves_the_process_as_it_was():
    names = sorted(_modules())
    done = subprocess.run([sys.executable, "-c", _PROBE, *names], capture_output=True, text=True,
                          timeout=300, env={"MPLBACKEND": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["after"] == report["before"]
    assert report["backend"] is None  # no module chose a matplotlib backend at import


def test_import_bertkit_is_cheap():
    """The verbs are loaded on first use: `import bertkit` pulls in neither torch nor matplotlib."""
    done = subprocess.run([sys.executable, "-c", "import sys, bertkit; "
                           "print(sorted(m for m in ('torch', 'matplotlib', 'transformers') "
                           "if m in sys.modules))"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_no_two_test_files_share_a_name():
    """pytest imports test files by their name (the tests folders are no packages): a second
    tests/*/test_x.py stops the whole run at collection ("import file mismatch")."""
    names = [p.name for p in Path(__file__).parent.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
