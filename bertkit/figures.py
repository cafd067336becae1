"""matplotlib as an optional extra (the `plot` extra), imported only to draw.

A command whose output is a picture (`bertkit plot ...`) fails with a one-line `UserError` when
matplotlib is missing; a run that draws on the side (a training run's loss.png) says so in one
line and goes on (`draw_or_skip`). Figures are `matplotlib.figure.Figure`s of their own, never
pyplot, so no backend is chosen and the caller's open figures are left alone. `save_png` is the
one way a picture reaches the disk.
"""
from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Callable, TypeVar

from bertkit.files import INSTALL_PLOT as INSTALL, UserError, atomic_file

T = TypeVar("T")


class MatplotlibMissing(UserError):
    """Drawing was asked for and matplotlib is not installed."""


def require_matplotlib(out: str | Path) -> None:
    """A one-line error naming the picture `out` when matplotlib cannot be imported."""
    try:
        import matplotlib.figure  # noqa: F401  (about 0.3 s: only drawing pays it)
    except ImportError:
        raise MatplotlibMissing(f"matplotlib not installed ({INSTALL}); cannot draw "
                                f"{Path(out).name}") from None


def new_figure(out: str | Path, **kwargs):
    """A fresh `matplotlib.figure.Figure(**kwargs)` for the picture `out`."""
    require_matplotlib(out)
    from matplotlib.figure import Figure
    return Figure(**kwargs)


def save_png(fig, out: str | Path, dpi: int = 120) -> Path:
    """Write the figure `fig` to `out` as a PNG cropped to what is drawn. The picture is drawn
    in memory first and then published in one rename, so a failed drawing leaves `out` as it
    was (no empty or half-written file)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    with atomic_file(out, "wb") as f:
        f.write(buffer.getvalue())
    return Path(out)


def colormap(name: str):
    from matplotlib import colormaps
    return colormaps[name]


def draw_or_skip(draw: Callable[[], T], out: str | Path) -> T | None:
    """draw(); without matplotlib, one warning line naming `out` and None."""
    try:
        return draw()
    except MatplotlibMissing:
        print(f"warning: matplotlib not installed ({INSTALL}); skipping {Path(out).name}",
              file=sys.stderr)
        return None
