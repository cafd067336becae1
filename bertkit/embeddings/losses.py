"""The losses that train a bi-encoder, over sentence vectors already computed.

Each takes the vectors of a batch's columns (`[B, D]` tensors, row i of every column from the
same example) and returns a scalar to minimise. The similarity is always the cosine, and the
values equal sentence-transformers' losses of the same name on the same vectors (tested):

- `multiple_negatives_ranking_loss`: pairs or triplets. Each anchor must pick its own positive
  among every positive (and hard negative) of the batch: a cross-entropy over `scale` times the
  cosines. The other rows' positives are the in-batch negatives, so a batch must not hold the
  same text twice (see `bertkit.embeddings.batches`).
- `simcse_loss`: unsupervised SimCSE, the same loss where the two columns are two passes of the
  same sentences through the encoder with dropout on (dropout is the only noise).
- `cosent_loss`: scored pairs. Every two pairs whose gold scores differ are ranked by their
  cosines; only the order of the scores matters.
- `cosine_mse_loss`: scored pairs, the cosine regressed onto the score (scores in 0..1, or -1..1).

The default scale 20 (a temperature of 0.05) is sentence-transformers' and SimCSE's.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

DEFAULT_SCALE = 20.0


def _wide(x: torch.Tensor) -> torch.Tensor:
    """`x` in float32 at least: a softmax over half-precision cosines times 20 loses digits."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosines of every row of `a` (`[N, D]`) with every row of `b` (`[M, D]`): `[N, M]`."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def _candidates(positives: torch.Tensor, negatives: torch.Tensor | None) -> torch.Tensor:
    """The positives, then every hard-negative column: `[B * (1 + K), D]`."""
    if negatives is None:
        return positives
    if negatives.dim() == 2:
        negatives = negatives.unsqueeze(1)
    if negatives.shape[0] != positives.shape[0] or negatives.shape[-1] != positives.shape[-1]:
        raise ValueError(f"negatives of shape {tuple(negatives.shape)} do not match positives "
                         f"of shape {tuple(positives.shape)}")
    return torch.cat([positives, negatives.transpose(0, 1).reshape(-1, positives.shape[-1])])


def multiple_negatives_ranking_loss(anchors: torch.Tensor, positives: torch.Tensor,
                                    negatives: torch.Tensor | None = None, *,
                                    scale: float = DEFAULT_SCALE,
                                    symmetric: bool = False) -> torch.Tensor:
    """In-batch negatives: anchor i must find positive i among the batch's candidates.

    `anchors` and `positives` are `[B, D]`; `negatives` (optional) are hard negatives, `[B, D]`
    (one per anchor) or `[B, K, D]`, added to every anchor's candidates. The loss is the mean
    cross-entropy of `scale * cos(anchor_i, candidate_j)` with target `i`. `symmetric` averages
    it with the backward direction: positive i must find anchor i among the anchors (the hard
    negatives take no part there), as sentence-transformers' MultipleNegativesSymmetricRankingLoss.
    """
    if anchors.shape != positives.shape or anchors.dim() != 2:
        raise ValueError(f"anchors {tuple(anchors.shape)} and positives "
                         f"{tuple(positives.shape)} must be [B, D] alike")
    if scale <= 0:
        raise ValueError(f"scale must be positive, not {scale}")
    targets = torch.arange(anchors.shape[0], device=anchors.device)
    logits = scale * cosine_matrix(anchors, _candidates(positives, negatives))
    loss = F.cross_entropy(_wide(logits), targets)
    if symmetric:
        backward = scale * cosine_matrix(positives, anchors)
        loss = (loss + F.cross_entropy(_wide(backward), targets)) / 2
    return loss


def simcse_loss(view_a: torch.Tensor, view_b: torch.Tensor, *,
                scale: float = DEFAULT_SCALE) -> torch.Tensor:
    """Unsupervised SimCSE: `multiple_negatives_ranking_loss` of two views of one batch.

    `view_a` and `view_b` (`[B, D]`) are the same B sentences encoded twice with dropout on, so
    the two passes differ only by their dropout masks; each sentence must find its other view
    among the batch's (Gao et al. 2021, whose temperature 0.05 is the scale 20)."""
    return multiple_negatives_ranking_loss(view_a, view_b, scale=scale)


def _pair_cosines(a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    if a.shape != b.shape or a.dim() != 2 or scores.shape != (a.shape[0],):
        raise ValueError(f"expected a and b [B, D] alike and scores [B], got {tuple(a.shape)}, "
                         f"{tuple(b.shape)} and {tuple(scores.shape)}")
    return F.cosine_similarity(_wide(a), _wide(b), dim=-1)


def cosent_loss(a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor, *,
                scale: float = DEFAULT_SCALE) -> torch.Tensor:
    """CoSENT (Su 2022): for every two pairs i, j whose gold scores have `scores[i] > scores[j]`,
    a penalty `exp(scale * (cos_j - cos_i))`; the loss is `log(1 + sum of them)`.

    `a` and `b` are `[B, D]` (pair i is row i of each), `scores` `[B]`. Only the order of the
    scores counts, so any scale of scores will do; equal scores are never compared."""
    cosines = scale * _pair_cosines(a, b, scores)
    higher = scores[:, None] > scores[None, :]  # [i, j]: pair i should have the higher cosine
    differences = (cosines[None, :] - cosines[:, None]).masked_fill(~higher, float("-inf"))
    return torch.logsumexp(torch.cat([cosines.new_zeros(1), differences.flatten()]), dim=0)


def cosine_mse_loss(a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The mean squared difference of `cos(a_i, b_i)` and `scores[i]` (sentence-transformers'
    CosineSimilarityLoss): the scores must be on the cosine's scale, 0..1 or -1..1."""
    cosines = _pair_cosines(a, b, scores)
    return F.mse_loss(cosines, scores.to(cosines.dtype))


__all__ = ["DEFAULT_SCALE", "cosent_loss", "cosine_matrix", "cosine_mse_loss",
           "multiple_negatives_ranking_loss", "simcse_loss"]
