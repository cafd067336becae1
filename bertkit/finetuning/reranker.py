"""A fine-tuned reranker (`bertkit finetune rerank`) in use, as sentence-transformers'
CrossEncoder is used:

    reranker = Reranker.load("out/rerank")
    reranker.predict([("how old is the moon", "The moon is 4.5 billion years old.")])
    reranker.rank("how old is the moon", passages, top_k=3, return_documents=True)

Scores are the model's relevance logits (CrossEncoder's with identity as activation, which the
saved config.json names), so `CrossEncoder(DIR).predict` gives the same numbers.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertkit.files import UserError
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.tasks.rerank import RerankExample


class Reranker:
    """A reranking model: `predict` scores (query, passage) pairs, `rank` orders passages."""

    def __init__(self, runner: TaskModel):
        if runner.task.verb != "rerank":
            raise UserError(f"{runner.source}: a {runner.task.name} model, not a reranker "
                            f"(`bertkit finetune rerank` makes one)")
        self.runner = runner

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu",
             batch_size: int = 64) -> "Reranker":
        """The reranker of a directory written by `bertkit finetune rerank` (or a model's name
        in the local Hugging Face cache)."""
        return cls(TaskModel.load(path, device=device, batch_size=batch_size))

    def predict(self, pairs: Sequence[tuple[str, str]] | tuple[str, str]) -> np.ndarray | float:
        """The relevance logit of each (query, passage) pair, float32; one pair: one
        number."""
        single = isinstance(pairs, tuple) and len(pairs) == 2 and isinstance(pairs[0], str)
        chosen = [pairs] if single else list(pairs)
        scores = self.runner.predict([RerankExample(q, (p,)) for q, p in chosen])
        out = np.array([s[0] for s in scores], dtype=np.float32)
        return float(out[0]) if single else out

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = None,
             return_documents: bool = False) -> list[dict]:
        """The documents by relevance to `query`, best first (ties: the earlier first):
        [{"corpus_id", "score"}, plus "text" with `return_documents`], the first `top_k`."""
        if not documents:
            return []
        scores, = self.runner.predict([RerankExample(query, tuple(documents))])
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[:top_k]
        return [{"corpus_id": i, "score": float(scores[i]),
                 **({"text": documents[i]} if return_documents else {})} for i in order]


__all__ = ["Reranker"]
