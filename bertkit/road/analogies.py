"""Analogies over static vectors (a - b + c: king - man + woman -> queen), their accuracy on a
file of questions, and chosen words drawn on the plane of their first two principal components.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from bertkit.embeddings.pca import pca
from bertkit.embeddings.static import StaticVectors
from bertkit.figures import new_figure, save_png
from bertkit.files import UserError, read_lines


def read_analogies(path: str | Path) -> list[tuple[str, str, str, str]]:
    """Analogy questions, one `a b c d` a line (d = a - b + c); blank lines and lines
    starting with # are skipped."""
    quads = []
    for number, line in read_lines(path, "analogies"):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 4:
            raise UserError(f"{path}:{number}: expected four words `a b c d` (d = a - b + c), "
                            f"got {len(words)}")
        quads.append(tuple(w.lower() for w in words))
    if not quads:
        raise UserError(f"{path}: no analogies")
    return quads


def analogy_accuracy(vectors: StaticVectors,
                     quads: Sequence[tuple[str, str, str, str]]) -> dict:
    """Share of the questions whose nearest answer (inputs excluded) is d. Questions with a
    word out of the vocabulary are skipped and counted."""
    right, asked, missed = 0, 0, []
    for a, b, c, d in quads:
        if not all(vectors.ids_of(w) for w in (a, b, c, d)):
            missed.append(" ".join((a, b, c, d)))
            continue
        asked += 1
        right += vectors.analogy(a, b, c, 1)[0][0] == d
    return {"accuracy": right / asked if asked else float("nan"), "correct": right,
            "answered": asked, "skipped": len(missed), "skipped_questions": missed}


def plot_words(vectors: StaticVectors, words: Sequence[str], out: str | Path,
               title: str | None = None) -> np.ndarray:
    """Chosen words' vectors on their first two principal components, a labelled point
    each, written to `out` (PNG, atomically). Returns the coordinates [N, 2]."""
    if len(words) < 3:
        raise UserError("--words: give at least three words to place on a plane")
    points, _ = pca(np.stack([vectors.vector(w) for w in words]))
    fig = new_figure(out, figsize=(7, 6))  # matplotlib (the `plot` extra) only to draw
    ax = fig.add_subplot()
    ax.scatter(points[:, 0], points[:, 1], s=18)
    for word, (x, y) in zip(words, points):
        ax.annotate(word, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=10)
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    ax.set_title(title or f"{len(words)} words, {vectors.dim}-dimensional vectors, PCA")
    save_png(fig, out)
    return points


__all__ = ["read_analogies", "analogy_accuracy", "plot_words"]
