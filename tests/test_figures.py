"""matplotlib is an extra: drawing says so in one line when it is missing, and nothing that
does not draw imports it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.figures import (MatplotlibMissing, draw_or_skip, new_figure, require_matplotlib,
                             save_png)


def test_drawing_without_matplotlib_is_a_one_line_error(no_matplotlib, tmp_path):
    with pytest.raises(MatplotlibMissing, match=r"^matplotlib not installed \(pip install "
                       r"'bertkit\[plot\]', or pip install -e '\.\[plot\]' in a "
                       r"checkout\); cannot draw a\.png$"):
        require_matplotlib(tmp_path / "a.png")
    with pytest.raises(MatplotlibMissing):
        new_figure(tmp_path / "a.png", figsize=(2, 2))


def test_a_side_picture_is_skipped_with_one_warning(no_matplotlib, tmp_path, capsys):
    assert draw_or_skip(lambda: new_figure(tmp_path / "loss.png"), tmp_path / "loss.png") is None
    assert capsys.readouterr().err == ("warning: matplotlib not installed (pip install "
                                       "'bertkit[plot]', or pip install -e '.[plot]' in a "
                                       "checkout); skipping loss.png\n")


def test_with_matplotlib_the_picture_is_drawn(tmp_path):
    assert draw_or_skip(lambda: new_figure(tmp_path / "a.png").dpi, tmp_path / "a.png") > 0


def test_save_png_writes_the_picture_at_the_asked_resolution(tmp_path):
    from matplotlib.image import imread

    fig = new_figure(tmp_path / "a.png", figsize=(2, 1))
    fig.add_subplot().plot([0, 1], [0, 1])
    assert save_png(fig, tmp_path / "a.png") == tmp_path / "a.png"
    assert save_png(fig, tmp_path / "b.png", dpi=60) == tmp_path / "b.png"
    a, b = imread(tmp_path / "a.png"), imread(tmp_path / "b.png")
    # cropped to what is drawn, so about (not exactly) dpi x inches; half the dpi, half the side
    assert a.shape[2] in (3, 4) and 150 < a.shape[1] < 260
    assert abs(a.shape[1] / b.shape[1] - 2.0) < 0.15


def test_a_failed_drawing_leaves_the_old_picture(tmp_path):
    out = tmp_path / "a.png"
    out.write_bytes(b"old")

    class Broken:
        def savefig(self, *args, **kwargs):
            args[0].write(b"\x89PNG half")
            raise RuntimeError("drawing failed")

    with pytest.raises(RuntimeError, match="drawing failed"):
        save_png(Broken(), out)
    assert out.read_bytes() == b"old" and sorted(tmp_path.iterdir()) == [out]


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
