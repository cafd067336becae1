"""ELECTRA's replaced-token detection (Clark et al. 2020), as pure tensor functions.

A small masked-LM generator fills the masked positions with tokens sampled from its softmax;
the discriminator then tells every token of the result as original or replaced, so it learns
from every position, not only the 15-40% a masked LM predicts:

    sampled  = sample_tokens(generator logits [N, V], uniform [N])     no gradient through it
    ids, replaced = corrupt(input_ids, mlm_positions, mlm_labels, sampled)
    loss     = generator MLM loss + detection_weight x detection loss (every non-padding token)

A sampled token equal to the original counts as original (the paper's labels). The sample is a
function of one uniform number per masked position, drawn with the batch's masks from the
data's `torch.Generator` (`examples.PretrainingBatches`, `sample_uniform`): a batch read
again, or a run resumed, samples exactly the same tokens. The losses that put these together
are `objectives.electra_loss` and `objectives.evaluate_lm`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertkit.files import UserError
from bertkit.model.heads import IGNORE_INDEX

GENERATOR_FRACTION = 0.25
DETECTION_WEIGHT = 50.0


@dataclass
class ElectraSettings:
    """The ELECTRA objective's own settings (--objective electra); masking is MLM's."""

    generator_fraction: float = GENERATOR_FRACTION
    """Generator size as a fraction of the discriminator's hidden size, heads and feed-forward
    width (same depth). Clark et al. found 1/4 to 1/2 best and used 1/4 for ELECTRA-Small
    and -Large: a stronger generator makes the detection task too hard early on."""
    detection_weight: float = DETECTION_WEIGHT
    """λ: weight of the discriminator's loss against the generator's MLM loss (Clark et
    al.'s 50: the per-token binary loss is far smaller than the MLM cross-entropy)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.generator_fraction <= 1.0:
            raise UserError(f"--generator-fraction must be in (0, 1], got "
                            f"{self.generator_fraction}")
        if not self.detection_weight > 0.0:
            raise UserError(f"--detection-weight must be positive, got {self.detection_weight}")


def draw_uniform(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Uniform numbers in [0, 1) of `shape`, one for each token a sample may replace."""
    return torch.rand(shape, generator=generator)


@torch.no_grad()
def sample_tokens(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token per row of logits [N, V] from softmax(logits), by the inverse of its
    cumulative distribution at uniform [N] in [0, 1): token i where cdf[i-1] <= u < cdf[i]
    (a token of probability 0 is never drawn). No gradient flows through the sample."""
    cdf = logits.detach().float().softmax(-1).cumsum(-1)  # [N, V]
    u = uniform.to(cdf.device, cdf.dtype)[:, None]  # [N, 1]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=logits.shape[-1] - 1)


def corrupt(input_ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor,
            sampled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and labels: input_ids [B, T] with each predicted position
    (flat index positions [N] into B*T, where labels [N] != IGNORE_INDEX) set to its sampled
    token [N]; replaced [B, T] True where the token differs from the original (labels).

    Padding entries (label IGNORE_INDEX) change nothing. No boolean indexing: the shapes never
    depend on the values, so a GPU step never waits for the host (each real position is
    predicted once; adding a difference at a repeated padding position adds 0)."""
    real = labels != IGNORE_INDEX
    flat = input_ids.reshape(-1)
    new = sampled.to(input_ids.dtype)
    shift = torch.where(real, new - flat[positions], torch.zeros_like(new))
    ids = flat.index_put((positions,), shift, accumulate=True)
    changed = (real & (new != labels)).to(torch.int32)
    replaced = torch.zeros_like(flat, dtype=torch.int32).index_put((positions,), changed,
                                                                   accumulate=True) > 0
    return ids.view_as(input_ids), replaced.view_as(input_ids)


def detection_terms(logits: torch.Tensor, replaced: torch.Tensor,
                    attention_mask: torch.Tensor | None):
    """(summed binary cross-entropy, correct judgements, token count) of the discriminator's
    logits [B, T] against replaced [B, T], over every non-padding token (attention_mask 1;
    all tokens without a mask), [CLS] and [SEP] included as in the paper's code."""
    weight = (torch.ones_like(logits, dtype=torch.float) if attention_mask is None
              else attention_mask.float())
    target = replaced.float()
    loss = F.binary_cross_entropy_with_logits(logits.float(), target, reduction="none")
    correct = (((logits > 0) == replaced).float() * weight).sum()
    return (loss * weight).sum(), correct, weight.sum()


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve of scores [M] for binary labels [M]: the chance that a random
    positive scores above a random negative, ties counting half (Mann-Whitney U, from the
    ranks). NaN when either class is absent."""
    scores, labels = scores.double().flatten(), labels.bool().flatten()
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = scores.argsort()
    sorted_scores = scores[order]
    ranks = torch.empty_like(scores)
    # tied scores share the mean of their ranks
    _, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True,
                                                  return_counts=True)
    ends = counts.cumsum(0).double()
    mean_rank = ends - (counts.double() - 1) / 2
    ranks[order] = mean_rank[inverse]
    u = ranks[labels].sum() - pos * (pos + 1) / 2
    return float(u / (pos * neg))


__all__ = ["ElectraSettings", "GENERATOR_FRACTION", "DETECTION_WEIGHT", "draw_uniform",
           "sample_tokens", "corrupt", "detection_terms", "auc"]
