"""Hybrid retrieval: several retrievers' rankings of the same queries fused into one.

Two rules, the two in common use:

- reciprocal-rank fusion (Cormack, Clarke and Buettcher 2009): a passage scores the sum over
  the rankings that hold it of `1 / (60 + rank)`, rank counted from 1; the scores themselves
  are never compared, so a dense model's cosines and BM25's unbounded scores mix without
  tuning. k = 60 is the paper's, fixed here as elsewhere (BEIR, Elasticsearch, Vespa);
- a weighted sum of each ranking's scores min-max normalised over the passages it returned
  for that query (its best 1, its last 0); a passage a ranking did not return adds 0 from it.

Both take rankings as (scores, indices) `[Q, L]` rows, best first, -1 (and any score) where a
row is shorter, and give the fused top `depth`, best first; passages of equal fused score come
in the order of their position in the corpus.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, Sequence

import torch

from bertkit.files import UserError

RRF_K = 60
"""Reciprocal-rank fusion's constant: a passage at rank r adds 1 / (RRF_K + r)."""


class Fusion(Protocol):
    """How one ranking's rows become each returned passage's contribution to the fused
    score."""

    description: str
    """The rule in words."""

    def contributions(self, scores: torch.Tensor, found: torch.Tensor, which: int
                      ) -> torch.Tensor:
        """`[Q, L]` float64 for ranking number `which` (its `scores`; `found` true where a
        passage is)."""


@dataclass(frozen=True)
class ReciprocalRank:
    """Reciprocal-rank fusion, k = RRF_K."""

    description: ClassVar[str] = f"reciprocal-rank fusion (k {RRF_K})"

    def contributions(self, scores, found, which):
        ranks = torch.arange(1, scores.shape[1] + 1, dtype=torch.float64)
        return (1.0 / (RRF_K + ranks)).expand(scores.shape)


@dataclass(frozen=True)
class WeightedSum:
    """A weighted sum of min-max normalised scores; `weights` one per ranking (none: 1 each)."""

    weights: tuple[float, ...] | None = None
    description: ClassVar[str] = "a weighted sum of min-max normalised scores"

    def contributions(self, scores, found, which):
        s = scores.double().masked_fill(~found, float("nan"))
        low = torch.nan_to_num(s, nan=float("inf")).amin(1, keepdim=True)
        high = torch.nan_to_num(s, nan=float("-inf")).amax(1, keepdim=True)
        span = high - low
        # a row whose passages all score alike: each is as good as the best
        normalised = torch.where(span > 0, (s - low) / span.clamp(min=1e-300),
                                 torch.ones_like(s))
        weight = 1.0 if self.weights is None else self.weights[which]
        return torch.nan_to_num(normalised, nan=0.0) * weight


FUSIONS = ("rrf", "sum")
"""The names of the fusion rules on the command line."""


def fusion_named(name: str, weights: Sequence[float] | None, retrievers: int) -> Fusion:
    """The fusion rule of a command line's `--fusion NAME` (`FUSIONS`) with its `--weights`
    for that many retrievers; a UserError for one retriever, or weights that do not fit."""
    if retrievers < 2:
        raise UserError(f"--fusion {name} fuses two or more retrievers; there is "
                        f"{retrievers}")
    if weights is not None and name != "sum":
        raise UserError("--weights are the weighted sum's (--fusion sum)")
    if weights is not None and len(weights) != retrievers:
        raise UserError(f"--weights: {len(weights)} given for {retrievers} retrievers (one "
                        f"each, in the order of --model, then --bm25)")
    if name == "rrf":
        return ReciprocalRank()
    if name == "sum":
        return WeightedSum(tuple(weights) if weights is not None else None)
    raise UserError(f"--fusion {name}: expected one of {', '.join(FUSIONS)}")


def fuse(rankings: Sequence[tuple[torch.Tensor, torch.Tensor]], fusion: Fusion, depth: int
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, indices) `[Q, depth]` float64 and long: the fused top `depth` of each query,
    best first (-1 and -inf where fewer passages were returned)."""
    if not rankings:
        raise ValueError("fusion needs at least one ranking")
    queries = len(rankings[0][1])
    keys, values = [], []
    for which, (scores, indices) in enumerate(rankings):
        scores, indices = torch.as_tensor(scores), torch.as_tensor(indices).long()
        found = indices >= 0
        part = fusion.contributions(scores, found, which)
        rows = torch.arange(queries).unsqueeze(1).expand_as(indices)
        keys.append(torch.stack([rows[found], indices[found]], 1))
        values.append(part[found])
    keys, values = torch.cat(keys), torch.cat(values)
    pairs, where = torch.unique(keys, dim=0, return_inverse=True)  # sorted: query, then passage
    totals = torch.zeros(len(pairs), dtype=torch.float64).index_add_(0, where, values)
    order = torch.sort(-totals, stable=True).indices
    order = order[torch.sort(pairs[order, 0], stable=True).indices]  # by query, best first
    query, passage, total = pairs[order, 0], pairs[order, 1], totals[order]
    starts = torch.zeros(queries + 1, dtype=torch.long)
    starts[1:] = torch.bincount(query, minlength=queries).cumsum(0)
    place = torch.arange(len(order)) - starts[query]
    keep = place < depth
    out_scores = torch.full((queries, depth), -torch.inf, dtype=torch.float64)
    out_indices = torch.full((queries, depth), -1, dtype=torch.long)
    out_scores[query[keep], place[keep]] = total[keep]
    out_indices[query[keep], place[keep]] = passage[keep]
    return out_scores, out_indices


__all__ = ["FUSIONS", "Fusion", "RRF_K", "ReciprocalRank", "WeightedSum", "fuse",
           "fusion_named"]
