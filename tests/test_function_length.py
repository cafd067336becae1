"""Functions short enough to read at once: no function in bertkit/ is longer than 80 lines
(from its `def` to its last line, docstring included; decorators not counted), but those
listed below, each with the reason it is long. And modules sized by one concept: none is longer
than 600 lines, but those listed in MODULE_EXCEPTIONS."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bertkit"
LIMIT = 80

# "path:function" -> why it is longer than LIMIT. A reader must accept the reason; once a
# function is split, its entry goes (the test fails on an entry that is no longer needed).
EXCEPTIONS: dict[str, str] = {}

MODULE_LIMIT = 600

# "path" -> why it is longer than MODULE_LIMIT: empty, and meant to stay so (a module that
# grows past the limit is cut where its concepts part; the test fails on a stale entry).
MODULE_EXCEPTIONS: dict[str, str] = {}


def long_functions(root: Path = PACKAGE, limit: int = LIMIT) -> dict[str, int]:
    """"path:name" -> lines of every function (nested ones and methods too) over `limit`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found[f"{path.relative_to(root).as_posix()}:{node.name}"] = lines
    return found


def test_no_function_is_longer_than_80_lines_without_a_reason():
    long = long_functions()
    unexplained = {name: lines for name, lines in long.items() if name not in EXCEPTIONS}
    assert not unexplained, f"functions over {LIMIT} lines: {unexplained}; split them"
    stale = sorted(set(EXCEPTIONS) - set(long))
    assert not stale, f"no longer over {LIMIT} lines: remove {stale} from EXCEPTIONS"
    assert all(reason.strip() for reason in EXCEPTIONS.values())


def test_the_scan_counts_from_def_to_last_line(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT - 1))
    (tmp_path / "m.py").write_text(f"def fits():\n{body}\n\n\nclass C:\n    def over(self):\n"
                                   f"        '''doc'''\n" + body.replace("    ", "        ") + "\n")
    assert long_functions(tmp_path) == {"m.py:over": LIMIT + 1}


def long_modules(root: Path = PACKAGE, limit: int = MODULE_LIMIT) -> dict[str, int]:
    """"path" -> lines of every module over `limit`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_is_longer_than_600_lines_without_a_reason():
    long = long_modules()
    unexplained = {name: lines for name, lines in long.items() if name not in MODULE_EXCEPTIONS}
    assert not unexplained, (f"modules over {MODULE_LIMIT} lines: {unexplained}; cut them where "
                             f"their concepts part")
    stale = sorted(set(MODULE_EXCEPTIONS) - set(long))
    assert not stale, f"no longer over {MODULE_LIMIT} lines: remove {stale} from MODULE_EXCEPTIONS"
    assert all(reason.strip() for reason in MODULE_EXCEPTIONS.values())


def test_the_module_scan_counts_lines(tmp_path):
    (tmp_path / "fits.py").write_text("x = 1\n" * MODULE_LIMIT)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "over.py").write_text("x = 1\n" * (MODULE_LIMIT + 1))
    assert long_modules(tmp_path) == {"pkg/over.py": MODULE_LIMIT + 1}
