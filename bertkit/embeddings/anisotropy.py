"""What contextual vectors look like: anisotropy, rogue dimensions, standardization.

Anisotropy (Ethayarajh 2019) is the expected cosine between the vectors of two random word
instances of a corpus: 0 for vectors spread in all directions, near 1 when they all point the
same way. It misleads cosine similarity, and Timkey & van Schijndel (2021) trace it to a few
*rogue dimensions*: writing the expected cosine as a sum over dimensions,

    E[cos(u, v)] = sum_i CC_i,   CC_i = E[u_i v_i / (|u| |v|)],

a handful of the CC_i make up most of it. Standardizing every dimension with the corpus mean
and standard deviation (Jurafsky & Martin's eqs 11.10-11.12: mu = mean of x, sigma = sqrt(mean of
(x - mu)^2), z = (x - mu) / sigma; the `Standardizer` of `bertkit.embeddings.standardize`)
removes them.

Pairs are drawn from different sentences (two instances in one sentence share context, which
is a different measurement: intra-sentence similarity). Every expectation here is exact over
all such pairs, computed from per-sentence sums in O(N H) rather than O(N^2 H).

Everything here is numpy on arrays; `anisotropy_report` runs an `Embedder` over a corpus.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from bertkit.embeddings.embedder import Embedder, resolve_layers
from bertkit.embeddings.standardize import Standardizer, unit_rows
from bertkit.files import UserError
from bertkit.text.sources import expand_one, numbered_texts, why_empty


def _group_sums(u: np.ndarray, groups: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-group sums of rows [G, H] and group sizes [G]; no groups = every row its own."""
    if groups is None:
        return u, np.ones(len(u))
    order = np.argsort(groups, kind="stable")
    g = np.asarray(groups)[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    return np.add.reduceat(u[order], starts, axis=0), np.diff(np.r_[starts, len(g)])


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    """Cosines between all rows of x [N, D] -> [N, N]."""
    u = unit_rows(x, np.float64)
    return u @ u.T


def cosine_contributions(x: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """CC_i for every dimension i: the mean over pairs of rows (u, v) from different groups of
    u_i v_i / (|u| |v|). Sums to `expected_cosine(x, groups)`. x: [N, H] -> [H]."""
    u = unit_rows(x, np.float64)
    total = u.sum(0)  # [H]
    per_group, sizes = _group_sums(u, groups)
    pairs = len(u) ** 2 - float((sizes ** 2).sum())
    if pairs <= 0:
        raise ValueError("need at least two vectors from different groups")
    return (total ** 2 - (per_group ** 2).sum(0)) / pairs


def expected_cosine(x: np.ndarray, groups: np.ndarray | None = None) -> float:
    """Anisotropy: the mean cosine between two rows of x [N, H] from different groups
    (sentences); without groups, over all pairs of distinct rows."""
    return float(cosine_contributions(x, groups).sum())


@dataclass
class RogueDimension:
    dim: int
    """Index of the dimension."""
    contribution: float
    """CC_i: its term of the expected cosine."""
    share: float
    """CC_i divided by the expected cosine."""
    mean: float
    """Mean value of the dimension over the corpus."""
    std: float
    """Standard deviation of the dimension over the corpus."""


def rogue_dimensions(x: np.ndarray, k: int = 3,
                     groups: np.ndarray | None = None) -> list[RogueDimension]:
    """The k dimensions contributing most to the expected cosine, largest first."""
    cc = cosine_contributions(x, groups)
    total = cc.sum()
    mean, std = np.asarray(x, np.float64).mean(0), np.asarray(x, np.float64).std(0)
    top = np.argsort(-cc)[:k]
    return [RogueDimension(int(i), float(cc[i]), float(cc[i] / total) if total else 0.0,
                           float(mean[i]), float(std[i])) for i in top]


def self_similarity(x: np.ndarray, words: Sequence[str], groups: np.ndarray | None = None,
                    min_count: int = 5) -> tuple[float, int]:
    """Ethayarajh's self-similarity: for each word type seen in at least `min_count`
    instances, the mean cosine between its vectors in different sentences; averaged over the
    types. Returns (mean, number of word types used); (nan, 0) when no type qualifies."""
    words = np.asarray(words)
    types, inverse, counts = np.unique(words, return_inverse=True, return_counts=True)
    u = unit_rows(x, np.float64)
    groups = np.arange(len(u)) if groups is None else np.asarray(groups)
    values = []
    for t in np.flatnonzero(counts >= min_count):
        rows = np.flatnonzero(inverse == t)
        per_group, sizes = _group_sums(u[rows], groups[rows])
        pairs = len(rows) ** 2 - float((sizes ** 2).sum())
        if pairs > 0:
            total = u[rows].sum(0)
            values.append(((total ** 2).sum() - (per_group ** 2).sum()) / pairs)
    return (float(np.mean(values)), len(values)) if values else (float("nan"), 0)


def intra_sentence_similarity(x: np.ndarray, groups: np.ndarray) -> float:
    """Ethayarajh's intra-sentence similarity: the mean cosine between each word vector and
    the mean vector of its sentence, averaged over sentences of two or more words."""
    x = np.asarray(x, np.float64)
    groups = np.asarray(groups)
    sums, sizes = _group_sums(x, groups)
    _, inverse = np.unique(groups, return_inverse=True)
    # [N, H]: each row's sentence mean
    centre = unit_rows(sums / sizes[:, None], np.float64)[inverse]
    cos = (unit_rows(x, np.float64) * centre).sum(1)
    per_sentence = np.bincount(inverse, weights=cos) / sizes
    return float(per_sentence[sizes >= 2].mean()) if (sizes >= 2).any() else float("nan")


# Over a corpus --------------------------------------------------------------------------------

def sample_lines(path: str | Path, n: int, seed: int = 0,
                 text_field: str = "text") -> list[str]:
    """Up to n non-blank texts drawn uniformly from a file of any size, or a folder, glob or
    `datasets` directory (reservoir sampling, one pass), in input order: its lines, or the
    `text_field` of its JSON lines, CSV rows or table rows."""
    rng = np.random.default_rng(seed)
    keep: list[tuple[int, str]] = []  # (place in the input, text)
    seen = 0
    for _, _, line in numbered_texts(path, text_field, "corpus"):
        if not line.strip():
            continue
        seen += 1
        if len(keep) < n:
            keep.append((seen, line))
        else:
            j = int(rng.integers(seen))
            if j < n:
                keep[j] = (seen, line)
    if not keep:
        raise UserError(f"{path}: no text ({why_empty(expand_one(path, text_field))})")
    return [line for _, line in sorted(keep)]


@dataclass
class LayerStats:
    layer: int
    """Hidden-state index: 0 = embeddings, L = last block."""
    anisotropy: float
    """Expected cosine between word vectors of different sentences."""
    self_similarity: float
    intra_sentence: float
    rogue: list[RogueDimension]
    """Top dimensions of the raw vectors by their share of the expected cosine."""
    typical_abs_mean: float
    typical_std: float
    """Median over dimensions of |mean| and of the standard deviation: what a rogue
    dimension's mean and std stand out from."""
    anisotropy_std: float
    """The same three measures after standardization."""
    self_similarity_std: float
    intra_sentence_std: float
    rogue_std: list[RogueDimension] = field(default_factory=list)


@dataclass
class AnisotropyReport:
    model: str
    corpus: str
    sentences: int
    words: int
    word_types: int
    """Word types with at least `min_count` instances (used for self-similarity)."""
    layers: list[LayerStats]
    standardized_with: str = "this sample"
    """Whose statistics standardized the vectors: this sample, or a fitted file's corpus."""

    def to_json(self) -> dict:
        return asdict(self)

    def table(self) -> str:
        """A markdown table, one row per layer, raw -> standardized."""
        lines = ["| layer | anisotropy | → std | self-sim | → std | intra-sent | → std | "
                 "top rogue dims (share of anisotropy) |",
                 "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for s in self.layers:
            rogue = ", ".join(f"{r.dim} ({r.share:.0%})" for r in s.rogue)
            lines.append(f"| {s.layer} | {s.anisotropy:.3f} | {s.anisotropy_std:.3f} | "
                         f"{s.self_similarity:.3f} | {s.self_similarity_std:.3f} | "
                         f"{s.intra_sentence:.3f} | {s.intra_sentence_std:.3f} | {rogue} |")
        return "\n".join(lines)

    def rogue_table(self) -> str:
        """The rogue dimensions of each layer with their mean and standard deviation, beside
        the median dimension's."""
        lines = ["| layer | dim | share of anisotropy | mean | std | median dim: abs mean, std |",
                 "|---:|---:|---:|---:|---:|---|"]
        for s in self.layers:
            for k, r in enumerate(s.rogue):
                typical = f"{s.typical_abs_mean:.3f}, {s.typical_std:.3f}" if k == 0 else ""
                lines.append(f"| {s.layer if k == 0 else ''} | {r.dim} | {r.share:.1%} | "
                             f"{r.mean:.3f} | {r.std:.3f} | {typical} |")
        return "\n".join(lines)


def anisotropy_report(embedder: Embedder, texts: Sequence[str], *, layers="all",
                      standardizer: Standardizer | None = None, rogue_k: int = 3,
                      min_count: int = 5, batch_size: int = 32, model_name: str = "",
                      corpus_name: str = "",
                      progress: bool = False) -> tuple[AnisotropyReport, Standardizer]:
    """Measure every chosen layer on the words of `texts` (subword pieces averaged into
    words, special tokens left out), raw and standardized.

    Standardizes with `standardizer` when given, else with one fitted on these vectors (the
    seeds' recipe); returns the report and the standardizer used.
    """
    chosen = resolve_layers(layers, embedder.config.num_layers)
    vectors, refs = embedder.words(texts, layers=chosen, combine="concat",
                                   batch_size=batch_size, progress=progress)
    if len(refs) < 2:
        raise UserError(f"{corpus_name or 'corpus'}: fewer than two words to compare")
    H = embedder.config.hidden_size
    per_layer = [vectors[:, k * H:(k + 1) * H] for k in range(len(chosen))]
    del vectors
    groups = np.array([r.item for r in refs])
    words = [r.text.lower() for r in refs]
    standardized_with = "this sample"
    if standardizer is None:
        standardizer = Standardizer.fit(per_layer, chosen, source=corpus_name)
    else:
        standardized_with = f"{Path(standardizer.source).name or 'a fitted file'} " \
                            f"({standardizer.count} words)"
    stats, types = [], 0
    for layer, x in zip(chosen, per_layer):
        z = standardizer.transform(x, layer)
        self_raw, types = self_similarity(x, words, groups, min_count)
        stats.append(LayerStats(
            layer=layer, anisotropy=expected_cosine(x, groups),
            self_similarity=self_raw, intra_sentence=intra_sentence_similarity(x, groups),
            rogue=rogue_dimensions(x, rogue_k, groups),
            typical_abs_mean=float(np.median(np.abs(x.mean(0)))),
            typical_std=float(np.median(x.std(0))),
            anisotropy_std=expected_cosine(z, groups),
            self_similarity_std=self_similarity(z, words, groups, min_count)[0],
            intra_sentence_std=intra_sentence_similarity(z, groups),
            rogue_std=rogue_dimensions(z, rogue_k, groups)))
    report = AnisotropyReport(model_name, corpus_name, len(texts), len(refs), types, stats,
                              standardized_with)
    return report, standardizer


__all__ = ["cosine_matrix", "cosine_contributions", "expected_cosine", "RogueDimension",
           "rogue_dimensions", "self_similarity", "intra_sentence_similarity", "sample_lines",
           "LayerStats", "AnisotropyReport", "anisotropy_report"]
