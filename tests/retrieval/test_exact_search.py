"""Exact top-k in blocks: the same passages as torch.topk over the whole score matrix, with
blocks that do not divide the sizes."""
from __future__ import annotations

import pytest
import torch

from bertkit.retrieval import search
from bertkit.retrieval.search import encode, excluded_rows, leave_out, top_k, unit_rows
from tests.retrieval.conftest import HashEmbedder, sentences


@pytest.mark.parametrize("query_block,passage_block", [(5, 13), (64, 7), (1, 1000), (38, 101)])
def test_blocks_give_the_full_matrix_top_k(query_block, passage_block):
    g = torch.Generator().manual_seed(0)
    queries = unit_rows(torch.randn(37, 8, generator=g)).double()
    passages = unit_rows(torch.randn(101, 8, generator=g)).double()
    scores, indices = top_k(queries, passages, 9, query_block=query_block,
                            passage_block=passage_block)
    full = (queries @ passages.T).topk(9, dim=1)
    assert torch.equal(indices, full.indices)
    # a block's product may sum in another order than the whole matrix's: equal to rounding
    assert torch.allclose(scores, full.values, rtol=0, atol=1e-12)


def test_rows_search_only_those_queries_in_their_order():
    g = torch.Generator().manual_seed(2)
    queries = unit_rows(torch.randn(23, 8, generator=g)).double()
    passages = unit_rows(torch.randn(40, 8, generator=g)).double()
    rows = torch.tensor([17, 3, 3, 22, 0, 9])
    scores, indices = top_k(queries, passages, 5, rows=rows, query_block=4, passage_block=7)
    full = (queries[rows] @ passages.T).topk(5, dim=1)
    assert torch.equal(indices, full.indices)
    assert torch.allclose(scores, full.values, rtol=0, atol=1e-12)


def test_k_beyond_the_corpus_ranks_every_passage_and_tells_progress():
    g = torch.Generator().manual_seed(1)
    queries, passages = torch.randn(10, 4, generator=g), torch.randn(6, 4, generator=g)
    told = []
    scores, indices = top_k(queries, passages, 50, query_block=4, passage_block=4,
                            done=told.append)
    assert indices.shape == (10, 6) and told == [4, 4, 2]
    assert torch.equal(indices, torch.argsort(queries @ passages.T, dim=1, descending=True))
    assert bool((scores[:, :-1] >= scores[:, 1:]).all())


def test_unit_rows_are_cosines_and_a_zero_row_stays_zero():
    rows = unit_rows(torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
    assert torch.allclose(rows, torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


def test_mismatched_widths_are_refused():
    with pytest.raises(ValueError, match=r"\[Q, D\] and \[N, D\]"):
        top_k(torch.zeros(2, 3), torch.zeros(4, 5), 1)


def test_leave_out_keeps_the_first_passages_not_excluded_as_a_plain_loop():
    g = torch.Generator().manual_seed(2)
    indices = torch.stack([torch.randperm(40, generator=g)[:15] for _ in range(30)])
    scores = torch.rand(30, 15, generator=g).sort(dim=1, descending=True).values
    excluded = [set(torch.randint(0, 40, (q % 7,), generator=g).tolist()) for q in range(30)]
    kept, values = leave_out(indices, scores, excluded_rows(excluded), 12)
    for q in range(30):
        want = [(i, s) for i, s in zip(indices[q].tolist(), scores[q].tolist())
                if i not in excluded[q]][:12]
        want += [(-1, float("-inf"))] * (12 - len(want))
        assert list(zip(kept[q].tolist(), values[q].tolist())) == want


def test_encode_in_chunks_gives_the_unit_vectors_of_one_call(monkeypatch, capsys):
    texts, embedder = sentences(10, 0), HashEmbedder()
    monkeypatch.setattr(search, "ENCODE_CHUNK", 3)
    vectors = encode(embedder, texts, what="passages")
    assert embedder.calls == 4
    assert torch.allclose(vectors, unit_rows(HashEmbedder().encode(texts)))
    assert "passages: 10/10 texts" in capsys.readouterr().err
