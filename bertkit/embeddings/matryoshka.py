"""Matryoshka embeddings: vectors whose first 64, 128, ... dimensions are a good vector too.

Training sums a loss over prefixes of the vectors (Kusupati et al. 2022); using one cuts the
vector to its first `dim` numbers and brings it back to unit length (`prefix`). Cosines do not
need the unit length, but a dot product or an index built for unit vectors does, so a cut
vector is always renormalised, as sentence-transformers does.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F


def prefix(vectors: torch.Tensor, dim: int | None) -> torch.Tensor:
    """The first `dim` numbers of each vector (the last axis), at unit length; `dim` None: the
    whole vector at unit length."""
    width = vectors.shape[-1]
    if dim is not None and not 0 < dim <= width:
        raise ValueError(f"a Matryoshka dimension must be in 1..{width}, not {dim}")
    return F.normalize(vectors[..., :dim] if dim is not None else vectors, dim=-1)


def matryoshka_loss(loss: Callable[..., torch.Tensor], columns: Sequence[torch.Tensor],
                    dims: Sequence[int], weights: Sequence[float] | None = None) -> torch.Tensor:
    """`sum(weight_d * loss(*(prefix(c, d) for c in columns)) for d in dims)`.

    `loss` takes the batch's columns of vectors (bind other arguments first, for example
    `lambda a, b: cosent_loss(a, b, scores)`); every column is cut to each of `dims` (include
    the full width to train the whole vector too). `weights` default to 1 each, as in
    sentence-transformers' MatryoshkaLoss."""
    if not dims:
        raise ValueError("no Matryoshka dimensions")
    weights = [1.0] * len(dims) if weights is None else list(weights)
    if len(weights) != len(dims):
        raise ValueError(f"{len(weights)} weights for {len(dims)} dimensions")
    total = None
    for dim, weight in zip(dims, weights):
        term = weight * loss(*(prefix(c, dim) for c in columns))
        total = term if total is None else total + term
    return total


__all__ = ["matryoshka_loss", "prefix"]
