"""matplotlib is an extra: drawing says so in one line when it is missing, and nothing that
does not draw imports it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.figures import MatplotlibMissing, draw_or_skip, new_figure, require_matplotlib


def test_drawing_without_matplotlib_is_a_one_line_error(no_matplotlib, tmp_path):
    with pytest.raises(MatplotlibMissing, match=r"^matplotlib not installed \(pip install "
                       r"bertkit\[plot\]\); cannot draw a\.png$"):
        require_matplotlib(tmp_path / "a.png")
    with pytest.raises(MatplotlibMissing):
        new_figure(tmp_path / "a.png", figsize=(2, 2))


def test_a_side_picture_is_skipped_with_one_warning(no_matplotlib, tmp_path, capsys):
    assert draw_or_skip(lambda: new_figure(tmp_path / "loss.png"), tmp_path / "loss.png") is None
    assert capsys.readouterr().err == ("warning: matplotlib not installed (pip install "
                                       "bertkit[plot]); skipping loss.png\n")


def test_with_matplotlib_the_picture_is_drawn(tmp_path):
    assert draw_or_skip(lambda: new_figure(tmp_path / "a.png").dpi, tmp_path / "a.png") > 0


@pytest.mark.slow
def test_modules_that_may_draw_import_matplotlib_only_to_draw():
    code = ("import sys\n"
            "import bertkit.embeddings.plots, bertkit.road.entities, bertkit.road.seq2seq\n"
            "import bertkit.training.loop, bertkit.cli.main, bertkit.cli.embeddings\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
