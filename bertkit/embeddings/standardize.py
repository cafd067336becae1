"""Rescaling vectors before they are compared: rows to unit length, dimensions to z-scores.

Cosine similarity is the dot product of unit-length rows (`unit_rows`). Standardization (the
seeds' eqs 11.10-11.12: mu = mean of x, sigma = sqrt(mean of (x - mu)^2), z = (x - mu) / sigma,
per dimension) removes the few *rogue dimensions* that make contextual vectors anisotropic (see
`bertkit.embeddings.anisotropy`). A `Standardizer` is fitted on a corpus, saved beside a model
as `STANDARDIZER_FILE`, and applied by the embedder on request.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import save as st_save

from bertkit.files import UserError, atomic_file, require_file

STANDARDIZER_FILE = "standardize.safetensors"
"""Where a model directory keeps its fitted standardizer (`anisotropy --fit-standardizer`)."""


def unit_rows(x: np.ndarray, dtype=None) -> np.ndarray:
    """Each row (along the last axis) scaled to length 1; zero rows stay zero. Computed in
    `dtype` (default: x's own; float64 where sums must be exact). The guard is that of
    torch.nn.functional.normalize (eps 1e-12), which sentence-transformers uses."""
    x = np.asarray(x, dtype=dtype)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@dataclass
class Standardizer:
    """z = (x - mean) / std per dimension, fitted on a corpus, for one or more layers."""

    mean: np.ndarray
    """[K, H] mean of each dimension, one row per fitted layer (eq 11.10)."""
    std: np.ndarray
    """[K, H] standard deviation of each dimension (eq 11.11, over |C|, not |C| - 1)."""
    layers: list[int]
    """Hidden-state index (0 = embeddings) of each row of mean / std."""
    count: int = 0
    """Number of vectors the statistics came from."""
    source: str = ""
    """What they were fitted on (corpus path), for the record."""
    path: str = field(default="", compare=False)
    """The file it was loaded from, for messages."""

    @classmethod
    def fit(cls, per_layer: Sequence[np.ndarray], layers: Sequence[int],
            source: str = "") -> "Standardizer":
        """Fit from one [N, H] array of vectors per layer."""
        if not len(per_layer) or len(per_layer[0]) < 2:
            raise ValueError("need at least two vectors to fit a standardizer")
        xs = [np.asarray(x, np.float64) for x in per_layer]
        mean = np.stack([x.mean(0) for x in xs])
        std = np.stack([x.std(0) for x in xs])
        # A constant dimension carries no information; leave it centred rather than divide by 0.
        std = np.where(std > 1e-12, std, 1.0)
        return cls(mean.astype(np.float32), std.astype(np.float32), [int(i) for i in layers],
                   len(xs[0]), source)

    def _row(self, layer: int) -> int:
        if layer not in self.layers:
            raise UserError(f"{self._name}fitted on layers {self.layers}, not {layer}")
        return self.layers.index(layer)

    @property
    def _name(self) -> str:
        return f"{self.path}: the standardizer was " if self.path else "the standardizer was "

    def check_width(self, width: int) -> None:
        """UserError when the vectors to standardize are not as wide as the fitted ones (a
        standardizer of another model)."""
        if width != self.mean.shape[-1]:
            raise UserError(f"{self._name}fitted on vectors of width {self.mean.shape[-1]}, "
                            f"but these have {width} (the standardizer of another model?)")

    def transform(self, x: np.ndarray, layer: int | None = None) -> np.ndarray:
        """Standardize vectors [..., H] of `layer` (may be omitted when one layer is fitted)."""
        row = self._row(layer) if layer is not None else 0
        if layer is None and len(self.layers) != 1:
            raise ValueError(f"say which layer: fitted on {self.layers}")
        self.check_width(np.shape(x)[-1])
        return ((np.asarray(x, np.float32) - self.mean[row]) / self.std[row]).astype(np.float32)

    def transform_layer(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """The same on a tensor [..., H], keeping its device."""
        row = self._row(layer)
        self.check_width(x.shape[-1])
        mean = torch.from_numpy(self.mean[row]).to(x.device, x.dtype)
        std = torch.from_numpy(self.std[row]).to(x.device, x.dtype)
        return (x - mean) / std

    def save(self, path: str | Path) -> Path:
        """Write a safetensors file (atomically)."""
        data = st_save({"mean": self.mean, "std": self.std,
                        "layers": np.asarray(self.layers, dtype=np.int64)},
                       metadata={"count": str(self.count), "source": self.source})
        with atomic_file(path, "wb") as f:
            f.write(data)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "Standardizer":
        p = require_file(path, "standardizer file")
        try:
            with safe_open(str(p), "np") as f:
                meta = f.metadata() or {}
                mean, std, layers = (f.get_tensor(k) for k in ("mean", "std", "layers"))
        except Exception as e:  # safetensors raises its own error types
            raise UserError(f"{p}: not a standardizer file ({e})") from None
        if mean.ndim != 2 or std.shape != mean.shape or layers.shape != (len(mean),) \
                or layers.dtype.kind not in "iu":
            raise UserError(f"{p}: not a standardizer file (mean {mean.shape}, std {std.shape}, "
                            f"layers {layers.shape}: expected [K, H], [K, H] and [K] integers)")
        if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
            raise UserError(f"{p}: the standardizer holds a non-finite mean or a std that is "
                            f"not positive")
        try:
            count = int(meta.get("count", 0))
        except ValueError:
            raise UserError(f"{p}: not a standardizer file (count {meta['count']!r})") from None
        return cls(mean, std, layers.tolist(), count, meta.get("source", ""), str(p))


__all__ = ["STANDARDIZER_FILE", "unit_rows", "Standardizer"]
