"""The top-level API: every advertised name resolves, and importing bertkit stays light."""
from __future__ import annotations

import subprocess
import sys

import bertkit


def test_every_exported_name_resolves():
    for name in bertkit.__all__:
        assert getattr(bertkit, name) is not None, name


def test_exports_survive_their_modules_being_imported_first():
    import bertkit.embeddings.embedder  # noqa: F401  a submodule import sets a package attribute
    from bertkit import Embedder, word_vector
    assert callable(word_vector) and Embedder.__name__ == "Embedder"


def test_import_is_lazy():
    code = "import sys, bertkit; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_library_never_imports_the_command_line():
    from pathlib import Path
    root = Path(bertkit.__file__).parent
    for path in root.rglob("*.py"):
        if path.parent.name != "cli":
            assert "bertkit.cli" not in path.read_text(encoding="utf-8"), path
