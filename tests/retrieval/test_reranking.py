"""Reranking: each query's first N passages reordered by the reranker's scores of (query,
passage), the rest below as they were; a directory that is no reranker is one line."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from bertkit.files import UserError
from bertkit.finetuning.reranker import Reranker
from bertkit.retrieval.reranking import load_reranker, rerank


class HashReranker:
    """`predict` with a fixed score per (query, passage), from its hash; counts its calls."""

    def __init__(self):
        self.calls = []

    def predict(self, pairs):
        self.calls.append(list(pairs))
        return np.array([int.from_bytes(hashlib.sha256(f"{q}|{p}".encode()).digest()[:4],
                                        "little") / 2**32 for q, p in pairs], dtype=np.float32)


def test_the_top_n_are_reordered_by_the_rerankers_scores_and_the_rest_kept_below():
    texts = [f"passage {i}" for i in range(30)]
    queries = ["first", "second", "third"]
    indices = torch.tensor([[5, 3, 9, 1, 7, 2], [4, 8, -1, -1, -1, -1], [0, 1, 2, 3, 4, 5]])
    scores = torch.arange(18, dtype=torch.float32).view(3, 6).flip(1)
    reranker = HashReranker()
    out_scores, out_indices = rerank(reranker, queries, texts, scores, indices, top=4)
    assert len(reranker.calls) == 1 and len(reranker.calls[0]) == 4 + 2 + 4  # one call
    for q, query in enumerate(queries):
        head = [i for i in indices[q, :4].tolist() if i >= 0]
        logit = dict(zip(head, reranker.predict([(query, texts[i]) for i in head])))
        expected = sorted(head, key=lambda i: -logit[i])
        assert out_indices[q, :len(expected)].tolist() == expected
        assert out_scores[q, :len(expected)].tolist() == pytest.approx(
            [float(logit[i]) for i in expected])
        assert out_indices[q, 4:].tolist() == indices[q, 4:].tolist()  # below, as they were
        assert out_scores[q, 4:].tolist() == scores[q, 4:].tolist()


def test_a_reranker_loads_and_other_models_are_one_line(tiny_reranker, tiny_sentence_model):
    reranker = load_reranker(tiny_reranker)
    assert isinstance(reranker, Reranker)
    with pytest.raises(UserError, match="not a fine-tuned task model"):
        load_reranker(tiny_sentence_model)
