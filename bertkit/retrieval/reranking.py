"""The second stage: each query's first `top` passages of a ranking reordered by a cross-encoder
(`bertkit.finetuning.reranker.Reranker`), the rest left below them in their order.

A reranked passage's score is the reranker's logit; the passages below keep their first-stage
scores, so scores compare within each part only (the order is what counts). All queries' pairs
go to the reranker in one call: its batches are full however few passages each query has.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

RERANK_TOP = 20
"""Passages `search` reranks per query by default: a MiniLM-sized cross-encoder scores 20 pairs
on two CPU cores in about the time a user waits for a page."""
RERANK_TOP_EVALUATION = 100
"""Passages `evaluate` reranks per query by default (BEIR's reranking of the top 100)."""


def load_reranker(path: str | Path, device: str | torch.device = "cpu", batch_size: int = 64,
                  progress: bool = False, precision: str = "fp32"):
    """The cross-encoder of a directory `finetune rerank` wrote (with `progress`, each call
    over many pairs shows how far it is on stderr; `precision`: fp32, or bf16 autocast);
    another kind of model is one error line saying what it is."""
    from bertkit.finetuning.predict import TaskModel
    from bertkit.finetuning.reranker import Reranker
    from bertkit.model.kind import ModelKind, require_kind

    require_kind(path, ModelKind.TASK)
    runner = TaskModel.load(path, device=device, batch_size=batch_size, precision=precision)
    return Reranker(replace(runner, progress=progress))


def rerank(reranker, queries: Sequence[str], texts: Sequence[str], scores: torch.Tensor,
           indices: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, indices) `[Q, L]` float64 and long: each row's first `top` passages (of
    `indices`, positions in `texts`; -1: none) ordered by `reranker.predict` on (query, passage),
    best first (equal logits: the first stage's order), then the rest as they were."""
    if top < 1:
        raise ValueError(f"rerank top must be at least 1, got {top}")
    top = min(top, indices.shape[1])
    head = indices[:, :top]
    found = head >= 0
    rows, cols = found.nonzero(as_tuple=True)
    logits = torch.full(head.shape, -torch.inf, dtype=torch.float64)
    if len(rows):
        pairs = [(queries[r], texts[i]) for r, i in zip(rows.tolist(), head[found].tolist())]
        logits[rows, cols] = torch.as_tensor(reranker.predict(pairs), dtype=torch.float64)
    order = torch.sort(-logits, dim=1, stable=True).indices
    out_indices, out_scores = indices.clone(), scores.to(torch.float64).clone()
    out_indices[:, :top] = head.gather(1, order)
    out_scores[:, :top] = logits.gather(1, order)
    return out_scores, out_indices


__all__ = ["RERANK_TOP", "RERANK_TOP_EVALUATION", "load_reranker", "rerank"]
