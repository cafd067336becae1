"""Principal component analysis, the one used by every 2-D picture of vectors (senses, words,
movies, the workbench's maps).

SVD leaves each component's sign free, and LAPACK builds may pick either: the sign is fixed here
so that the same data always gives the same picture. Each component points where the sum of
its loadings is positive.
"""
from __future__ import annotations

import numpy as np


def pca(x: np.ndarray, components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `x` [N, D] on their first `components` principal components, [N, k], and
    the share of the variance each component explains, [k]."""
    x = np.asarray(x, np.float64)
    centred = x - x.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    axes = vt[:components]
    axes = axes * np.sign(axes.sum(1, keepdims=True) + 1e-30)
    explained = s[:components] ** 2 / max((s ** 2).sum(), 1e-30)
    return centred @ axes.T, explained


__all__ = ["pca"]
