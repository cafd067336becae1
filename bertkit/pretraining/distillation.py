"""Task-agnostic distillation during pretraining: a student learns a pretrained teacher's
self-attention relations (MiniLM v2, Wang et al. 2021, "MiniLMv2: Multi-Head Self-Attention
Relation Distillation for Compressing Pretrained Transformers") and/or its hidden states
(DistilBERT, Sanh et al. 2019; TinyBERT, Jiao et al. 2020), beside the masked LM. Pure tensor
functions, and the settings of `pretrain --objective distill`:

    relations(x [B, T, H], heads)   the scaled dot products of x with itself, split into
                                    `heads` relation heads: [B, R, T, T] logits
    relation_kl(student, teacher)   KL(teacher relations || student relations), mean over the
                                    relation heads and the real query tokens
    states_mse(student, teacher)    MSE of hidden states [B, T, H] over the real tokens

MiniLM v2 concatenates a layer's attention heads back into one [T, H] matrix for each of the
queries, keys and values, splits it again into R relation heads (R need not be the number of
attention heads: teacher and student may differ in both width and heads), and matches each
head's softmax(x_r x_r^T / sqrt(d_r)) of the teacher with the student's, for the
query-query, key-key and value-value relations; the loss is their sum.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertkit.files import UserError

RELATION_HEADS = 16
"""Relation heads where none are given: a divisor of every preset's width and of the common
BERT widths (384, 768, 1024); MiniLM v2 used 48 for its base-size students and 64 for large."""


@dataclass
class DistillSettings:
    """The distill objective's own settings (--objective distill); masking is MLM's."""

    teacher: str | None = None
    """A pretrained BERT-family encoder directory (or Hub name) whose tokenizer the data was
    prepared with: the student learns its self-attention relations and/or hidden states
    beside the masked LM. It runs beside the student, in eval mode without gradients, and is
    not saved."""
    teacher_layer: int | None = None
    """The teacher's layer (from 1) whose relations and states the student's last layer
    learns; none: its last. MiniLM v2 takes an upper-middle layer of a large teacher (21 of
    BERT-large's 24)."""
    relation_heads: int = RELATION_HEADS
    """Relation heads the queries, keys and values of both models are split into (MiniLM
    v2): a divisor of the student's and the teacher's hidden sizes."""
    relation_weight: float = 1.0
    """Weight of the attention-relation loss (the sum of the query-query, key-key and
    value-value KL terms of MiniLM v2) beside the masked LM's; 0: none."""
    hidden_weight: float = 0.0
    """Weight of the hidden-state loss: MSE between the student's last hidden states
    (through a learned projection where its width differs) and the teacher layer's
    (DistilBERT, TinyBERT); 0: none."""

    def __post_init__(self) -> None:
        self.teacher = str(self.teacher) if self.teacher is not None else None
        if self.teacher_layer is not None and self.teacher_layer < 1:
            raise UserError(f"--teacher-layer counts from 1, got {self.teacher_layer}")
        if self.relation_heads < 1:
            raise UserError(f"--relation-heads must be at least 1, got {self.relation_heads}")
        if self.relation_weight < 0 or self.hidden_weight < 0:
            raise UserError(f"--relation-weight and --hidden-weight must be at least 0, got "
                            f"{self.relation_weight:g} and {self.hidden_weight:g}")
        if self.relation_weight == 0 and self.hidden_weight == 0:
            raise UserError("--relation-weight and --hidden-weight are both 0: the student "
                            "would learn nothing from the teacher")


def relations(x: torch.Tensor, heads: int) -> torch.Tensor:
    """x [B, T, H] (a layer's queries, keys or values, its attention heads side by side) as
    `heads` relation heads of width d = H / heads: their scaled dot products
    x_r x_r^T / sqrt(d), [B, R, T, T], in fp32."""
    B, T, H = x.shape
    d = H // heads
    xr = x.float().view(B, T, heads, d).transpose(1, 2)  # [B, R, T, d]
    return (xr @ xr.transpose(-1, -2)) / math.sqrt(d)


def relation_kl(student: torch.Tensor, teacher: torch.Tensor, heads: int,
                mask: torch.Tensor | None = None) -> torch.Tensor:
    """KL(softmax(teacher relations) || softmax(student relations)) over the keys, averaged
    over the relation heads and the real query tokens: student [B, T, Hs], teacher
    [B, T, Ht], `mask` [B, T] (1 for a real token; none: all real). Padded keys get no
    probability in either."""
    s, t = relations(student, heads), relations(teacher.detach(), heads)  # [B, R, T, T]
    keys = None if mask is None else mask.bool()[:, None, None, :]  # [B, 1, 1, T]
    if keys is not None:
        s, t = s.masked_fill(~keys, float("-inf")), t.masked_fill(~keys, float("-inf"))
    log_q, log_p = F.log_softmax(s, -1), F.log_softmax(t, -1)
    per_key = log_p.exp() * (log_p - log_q)
    if keys is not None:  # exp(-inf) * (-inf - -inf) would be NaN
        per_key = per_key.masked_fill(~keys, 0.0)
    per_query = per_key.sum(-1)  # [B, R, T]
    if mask is None:
        return per_query.mean()
    queries = mask.float()[:, None, :]  # [B, 1, T]
    return (per_query * queries).sum() / (queries.sum() * heads).clamp(min=1)


def states_mse(student: torch.Tensor, teacher: torch.Tensor,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared difference of hidden states [B, T, H] of one width, over the real
    tokens (`mask` [B, T]; none: all) and the H dimensions, in fp32."""
    squared = (student.float() - teacher.float()) ** 2
    if mask is None:
        return squared.mean()
    keep = mask.float()[..., None]
    return (squared * keep).sum() / (keep.sum() * student.shape[-1]).clamp(min=1)


def check_widths(heads: int, widths: dict[str, int]) -> None:
    """Refuse relation heads that do not divide a model's width ({"student": H, ...})."""
    for who, width in widths.items():
        if width % heads:
            raise UserError(f"--relation-heads {heads} does not divide the {who}'s hidden "
                            f"size {width}")


__all__ = ["DistillSettings", "RELATION_HEADS", "relations", "relation_kl", "states_mse",
           "check_widths"]
