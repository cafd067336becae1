"""The one PCA: the principal components of a reference (the covariance's eigenvectors, and
scikit-learn's PCA) up to each axis's sign, and that sign fixed."""
from __future__ import annotations

import numpy as np
import pytest

from bertkit.embeddings.pca import pca


def _data(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(40, 6)) * np.array([5.0, 3.0, 1.0, 0.5, 0.2, 0.1]) + 7.0


def test_pca_keeps_the_main_directions():
    rng = np.random.default_rng(0)
    t = rng.normal(size=20)
    s = rng.normal(size=20) * 0.1
    basis = np.linalg.qr(rng.normal(size=(6, 2)))[0].T  # two orthonormal directions in 6-D
    points, _ = pca(np.outer(t, basis[0]) + np.outer(s, basis[1]) + 3.0)
    # distances in the plane are those of the data, which lies in a plane
    d_plane = np.linalg.norm(points[:, None] - points[None], axis=-1)
    d_data = np.hypot(t[:, None] - t[None], s[:, None] - s[None])
    assert np.allclose(d_plane, d_data, atol=1e-9)
    assert np.abs(points[:, 0]).std() > np.abs(points[:, 1]).std()


def test_equals_the_covariance_eigenvectors_up_to_sign():
    x = _data()
    points, explained = pca(x, components=3)
    values, vectors = np.linalg.eigh(np.cov(x, rowvar=False))
    order = np.argsort(values)[::-1][:3]
    reference = (x - x.mean(0)) @ vectors[:, order]
    for k in range(3):
        sign = np.sign(points[:, k] @ reference[:, k])
        np.testing.assert_allclose(points[:, k], sign * reference[:, k], atol=1e-9)
    np.testing.assert_allclose(explained, values[order] / values.sum(), rtol=1e-9)


def test_equals_scikit_learn_up_to_sign():
    decomposition = pytest.importorskip("sklearn.decomposition")
    x = _data(1)
    points, explained = pca(x)
    reference = decomposition.PCA(n_components=2, svd_solver="full").fit(x)
    expected = reference.transform(x)
    signs = np.sign((points * expected).sum(0))
    np.testing.assert_allclose(points, expected * signs, atol=1e-9)
    np.testing.assert_allclose(explained, reference.explained_variance_ratio_, rtol=1e-9)


def test_the_sign_is_fixed():
    x = _data(2)
    points, _ = pca(x)
    # each axis points where its loadings sum to a positive number: recover the axes
    centred = x - x.mean(0)
    axes = np.linalg.lstsq(centred, points, rcond=None)[0].T  # [2, D]
    assert (axes.sum(1) > 0).all()
    # the same cloud in another row order, or mirrored, gives the same picture
    order = np.random.default_rng(0).permutation(len(x))
    np.testing.assert_allclose(pca(x[order])[0], points[order], atol=1e-9)
    np.testing.assert_allclose(pca(-x)[0], -points, atol=1e-9)
    np.testing.assert_array_equal(pca(x)[0], points)
