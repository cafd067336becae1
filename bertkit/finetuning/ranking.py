"""What a reranker (a cross-encoder: `bertkit.finetuning.tasks.rerank`) learns from and is
judged by: its three losses over relevance logits, the figures of its ranked candidates, and
the scores of a teacher that MarginMSE distils.

Losses (logits are the model's one output per (query, passage) pair):

    bce_loss         pointwise: binary cross-entropy of each logit against a label in [0, 1]
    listwise_loss    softmax cross-entropy over one positive and its negatives (from the file
                     and, optionally, the batch's other positives), the positive the target
    margin_mse_loss  the squared error between the student's margin s(q, p+) - s(q, p-) and
                     the teacher's (Hofstätter et al. 2020)

and what bounds a step's memory: `sample_in_batch` draws a few of the batch's other positives
per row as its negatives (sentence-transformers' cross-encoder MultipleNegativesRankingLoss
samples `num_negatives`, 4, the same way), and `chunked_logits` runs the pairs through the
model a chunk at a time, each chunk's activations recomputed in the backward pass.

Shapes: B rows (one positive each), K negatives a row, N pairs.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from bertkit.embeddings.evaluation import retrieval_figures
from bertkit.finetuning.inputs import length_batches
from bertkit.finetuning.task import model_inputs

PairScorer = Callable[[Sequence[str], Sequence[str]], torch.Tensor]
"""(queries, passages) -> one score per pair [N], float32 on the CPU."""


def bce_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of logits [N] against labels [N] in [0, 1] (soft labels
    allowed: a scored pair's score)."""
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


def listwise_loss(positive: torch.Tensor, negatives: torch.Tensor | None = None,
                  negative_mask: torch.Tensor | None = None, cross: torch.Tensor | None = None,
                  cross_mask: torch.Tensor | None = None, first: int = 0) -> torch.Tensor:
    """Mean over rows of -log softmax(candidates)[positive]. Row i's candidates: its positive
    [B], its negatives [B, K] where `negative_mask` [B, K] is true (rows have different
    counts), and with `cross` [B, B'] (cross[i, j] = s(q_i, p_j), the batch's other positives
    scored against q_i) those j != first + i where `cross_mask` is true: another row of the
    same query, or whose positive is one of row i's relevant passages, is no negative of it.
    `first`: the rows are a share of a batch of B' rows, starting at that row (B' = B: 0)."""
    columns = [positive.float()[:, None]]
    if negatives is not None:
        keep = torch.ones_like(negatives, dtype=torch.bool) if negative_mask is None \
            else negative_mask
        columns.append(negatives.float().masked_fill(~keep, float("-inf")))
    if cross is not None:
        rows = torch.arange(cross.shape[0], device=cross.device)[:, None] + first
        keep = rows != torch.arange(cross.shape[1], device=cross.device)[None, :]
        if cross_mask is not None:
            keep &= cross_mask
        columns.append(cross.float().masked_fill(~keep, float("-inf")))
    scores = torch.cat(columns, dim=1)  # [B, 1 + K (+ B)]
    target = torch.zeros(len(scores), dtype=torch.long, device=scores.device)
    return F.cross_entropy(scores, target)


def margin_mse_loss(positive: torch.Tensor, negative: torch.Tensor,
                    teacher_margin: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the student's margins s(q, p+) - s(q, p-) [B] against the
    teacher's [B]."""
    return F.mse_loss(positive.float() - negative.float(), teacher_margin.float())


def sample_in_batch(allowed: torch.Tensor, count: int,
                    generator: torch.Generator) -> torch.Tensor:
    """[B, B] bool: for each row i, `count` of the columns j that `allowed` [B, B] marks (row
    j's positive may be a negative of row i), drawn uniformly without replacement from
    `generator`; all of them where a row has no more than `count`."""
    keys = torch.rand(allowed.shape, generator=generator).masked_fill(~allowed, 2.0)
    rank = keys.argsort(dim=1).argsort(dim=1)  # each column's place in its row's draw
    return allowed & (rank < count)


def chunked_logits(model: torch.nn.Module, inputs: Sequence[torch.Tensor],
                   size: int) -> torch.Tensor:
    """The model's first output [N] over the rows of `inputs` (ids, type ids, mask), `size`
    rows at a time, each chunk under activation checkpointing: its activations are dropped
    after its forward and recomputed (the same dropout drawn again) when the backward pass
    reaches it, so that a step holds one chunk's activations and every pair's logit, not all
    the pairs' activations. The gradient is the unchunked one: GradCache's (Gao et al. 2021)
    memory at GradCache's cost, a second forward pass, inside the one backward the training
    loop calls."""
    def logits(*chunk: torch.Tensor) -> torch.Tensor:
        return model(*chunk)[:, 0]
    return torch.cat([checkpoint(logits, *(x[start:start + size] for x in inputs),
                                 use_reentrant=False)
                      for start in range(0, len(inputs[0]), size)])


# Figures ----------------------------------------------------------------------------------------

def ranking_figures(scores: Sequence[torch.Tensor], relevant: Sequence[Sequence[int]],
                    k: int = 10) -> dict:
    """MRR@k, recall@1, recall@k and nDCG@k of each query's candidates ranked by their scores
    (`scores[q]`: one per candidate; `relevant[q]`: the indices of the relevant ones), as
    `bertkit.embeddings.evaluation.retrieval_figures` computes them for a bi-encoder: a
    query's candidates are its row, padded with -inf (never relevant, ranked last). Ties
    count against the model: a relevant candidate ranks after an irrelevant one of the same
    score (a file lists the relevant first, and bf16 logits tie often)."""
    width = max(len(s) for s in scores)
    matrix = torch.full((len(scores), width), float("-inf"), dtype=torch.float64)
    moved = []
    for q, (s, hits) in enumerate(zip(scores, relevant)):
        hits = set(hits)  # the irrelevant first, since ties rank the earlier first
        order = [i for i in range(len(s)) if i not in hits] + sorted(hits)
        matrix[q, :len(s)] = s.double()[order]
        moved.append(list(range(len(s) - len(hits), len(s))))
    figures = retrieval_figures(matrix, moved, k=k)
    return {**figures.as_dict(), "queries": figures.queries}


def pointwise_figures(logits: torch.Tensor, labels: torch.Tensor) -> dict:
    """Binary cross-entropy of the logits against the labels, and the accuracy of calling a
    pair relevant when its logit is above 0 (its label at least 0.5)."""
    right = (logits > 0) == (labels >= 0.5)
    return {"bce": float(bce_loss(logits, labels)), "accuracy": float(right.double().mean()),
            "pairs": len(labels)}


# A teacher's scores -------------------------------------------------------------------------------

def model_scores(model: torch.nn.Module, task, tokenizer, examples: Sequence,
                 device: torch.device, batch_size: int = 64) -> torch.Tensor:
    """The logits [N] of a reranker `model` over every (query, passage) pair of `examples`, in
    order, through its task's `encode` and `collate` (batches of similar lengths)."""
    items = task.encode(tokenizer, examples)
    out = torch.empty(len(items))
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for idx in length_batches([len(it.ids) for it in items], batch_size):
            batch = {k: v.to(device) for k, v in task.collate([items[i] for i in idx]).items()}
            out[idx] = model(*model_inputs(batch))[:, 0].float().cpu()
    model.train(was_training)
    return out


def cosine_scorer(embedder, batch_size: int = 64) -> PairScorer:
    """A sentence encoder as a scorer of pairs: the cosine of the query's and the passage's
    vectors (anything with sentence-transformers' `encode`, such as an `Embedder`); each
    distinct text is encoded once."""
    def score(queries: Sequence[str], passages: Sequence[str]) -> torch.Tensor:
        texts = list(dict.fromkeys([*queries, *passages]))
        index = {t: i for i, t in enumerate(texts)}
        vectors = F.normalize(torch.from_numpy(embedder.encode(texts, batch_size=batch_size))
                              .float(), dim=-1)
        q = vectors[[index[t] for t in queries]]
        p = vectors[[index[t] for t in passages]]
        return (q * p).sum(-1)
    return score


__all__ = ["PairScorer", "bce_loss", "listwise_loss", "margin_mse_loss", "sample_in_batch",
           "chunked_logits", "ranking_figures",
           "pointwise_figures", "model_scores", "cosine_scorer"]
