"""Index directories: what each retriever finds after a save and a load equals the exact
search of the model's own vectors (dense: cosines; sparse: dot products) and bm25s' own; the
Searcher fuses and reranks as the library's functions do; a missing or broken index is one
line."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.sparse_encoder import SparseEncoder
from bertkit.files import UserError
from bertkit.retrieval.beir import Passages
from bertkit.retrieval.bm25 import Bm25
from bertkit.retrieval.fusion import ReciprocalRank, fuse
from bertkit.retrieval.corpus_index import FUSION_CANDIDATES, INDEX_FILE, Index, Searcher, build_index, corpus_hash
from bertkit.retrieval.reranking import load_reranker, rerank

from tests.retrieval.conftest import sentences


def corpus(n: int = 80) -> Passages:
    texts = sentences(n, 11)
    return Passages([f"d{i}" for i in range(n)], texts, [f"c:{i}" for i in range(n)])


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_sentence_model, tiny_sparse_model):
    passages = corpus()
    out = tmp_path_factory.mktemp("index") / "index"
    build_index(out, passages, [tiny_sentence_model, tiny_sparse_model], bm25=True,
                progress=False)
    return out, passages


QUERIES = ["river bank money", "stone king ship horse", "rain"]


def test_the_index_file_says_what_built_it(built, tiny_sentence_model, tiny_sparse_model):
    out, passages = built
    meta = json.loads((out / INDEX_FILE).read_text())
    assert meta["passages"] == 80 and meta["corpus_sha256"] == corpus_hash(passages)
    assert [(r["kind"], r["model"]) for r in meta["retrievers"]] == [
        ("dense", str(tiny_sentence_model)), ("sparse", str(tiny_sparse_model)), ("bm25", None)]


def test_each_retriever_after_a_load_finds_the_exact_top_k(built, tiny_sentence_model,
                                                          tiny_sparse_model):
    out, passages = built
    dense, sparse, bm25 = Index.load(out).retrievers
    embedder = Embedder.load(tiny_sentence_model)
    q = torch.nn.functional.normalize(torch.as_tensor(embedder.encode(QUERIES)), dim=1)
    p = torch.nn.functional.normalize(torch.as_tensor(embedder.encode(passages.texts)), dim=1)
    scores, indices = dense.top_k(QUERIES, 7)
    assert torch.equal(indices, (q @ p.T).topk(7, dim=1).indices)
    assert torch.allclose(scores, (q @ p.T).topk(7, dim=1).values, atol=1e-5)
    one = dense.top_k(QUERIES[:1], 7)  # a single query takes the short path
    assert torch.equal(one[1], indices[:1])

    encoder = SparseEncoder.load(tiny_sparse_model)
    products = encoder.similarity(encoder.encode(QUERIES), encoder.encode(passages.texts))
    scores, indices = sparse.top_k(QUERIES, 7)
    assert torch.allclose(scores, products.topk(7, dim=1).values, atol=1e-5)
    assert torch.allclose(products.gather(1, indices), scores, atol=1e-5)

    theirs = Bm25(passages.texts).top_k(QUERIES, 7)
    scores, indices = bm25.top_k(QUERIES, 7)
    assert indices.tolist() == theirs[1].tolist()


def test_the_searcher_fuses_and_reranks(built, tiny_reranker):
    out, passages = built
    index = Index.load(out)
    rankings = [r.top_k(QUERIES, FUSION_CANDIDATES) for r in index.retrievers]
    fused = fuse(rankings, ReciprocalRank(), 12)
    hits = Searcher(index, ReciprocalRank()).search(QUERIES, top_k=5)
    assert [[h.id for h in row] for row in hits] == [
        [passages.ids[i] for i in row[:5]] for row in fused[1].tolist()]
    assert hits[0][0].text == passages.texts[fused[1][0, 0]]
    reranker = load_reranker(tiny_reranker)
    reranked = rerank(reranker, QUERIES, passages.texts, *fused, top=12)
    hits = Searcher(index, ReciprocalRank(), reranker, rerank_top=12).search(QUERIES, top_k=4)
    assert [[h.id for h in row] for row in hits] == [
        [passages.ids[i] for i in row[:4]] for row in reranked[1].tolist()]


def test_several_retrievers_need_a_fusion_and_one_takes_none(built, tmp_path, tiny_sentence_model):
    out, _ = built
    with pytest.raises(UserError, match="give --fusion"):
        Searcher(Index.load(out))
    one = build_index(tmp_path / "one", corpus(20), bm25=True, progress=False)
    with pytest.raises(UserError, match="fuses several retrievers"):
        Searcher(one, ReciprocalRank())


def test_a_missing_or_broken_index_is_one_line(built, tmp_path):
    with pytest.raises(UserError, match="not an index directory"):
        Index.load(tmp_path)
    out, _ = built
    broken = tmp_path / "broken"
    broken.mkdir()
    meta = json.loads((out / INDEX_FILE).read_text())
    (broken / INDEX_FILE).write_text(json.dumps(meta))
    (broken / "passages.jsonl").write_text((out / "passages.jsonl").read_text())
    with pytest.raises(UserError, match="dense-0.npy is missing"):
        Index.load(broken)
    (broken / INDEX_FILE).write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(UserError, match="version 99"):
        Index.load(broken)


def test_sparse_vectors_cut_to_their_heaviest_terms(tmp_path, tiny_sparse_model):
    passages = corpus(30)
    out = build_index(tmp_path / "cut", passages, [tiny_sparse_model], max_terms=4,
                      progress=False)
    assert json.loads((tmp_path / "cut" / INDEX_FILE).read_text())["retrievers"][0][
        "max_terms"] == 4
    sparse, = Index.load(tmp_path / "cut").retrievers
    assert sparse.max_terms == 4 and (np.diff(sparse.matrix.tocsr().indptr) <= 4).all()

    def cut(vectors):
        top = vectors.topk(4, dim=1)
        return torch.zeros_like(vectors).scatter_(1, top.indices, top.values)

    encoder = SparseEncoder.load(tiny_sparse_model)
    products = cut(encoder.encode(QUERIES, convert_to_sparse_tensor=False)) @ cut(
        encoder.encode(passages.texts, convert_to_sparse_tensor=False)).T
    scores, indices = sparse.top_k(QUERIES, 5)
    assert torch.allclose(scores, products.topk(5, dim=1).values, atol=1e-5)
    assert out.retrievers[0].max_terms == 4


def test_a_corpus_encoded_in_chunks_warns_once_a_model(tmp_path, monkeypatch,
                                                        tiny_sentence_model, tiny_sparse_model):
    """Each chunk of the corpus is one call of the model: the texts cut in every chunk are
    summed into one warning per model, not one line a chunk."""
    from bertkit.retrieval import retrievers, search

    monkeypatch.setattr(search, "ENCODE_CHUNK", 8)
    monkeypatch.setattr(retrievers, "SPARSE_CHUNK", 8)
    texts = sentences(30, 11)
    long = {3, 12, 13, 29}  # in three of the four chunks
    texts = [" ".join([t] * 12) if i in long else t for i, t in enumerate(texts)]
    passages = Passages([f"d{i}" for i in range(30)], texts, [f"c:{i}" for i in range(30)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_index(tmp_path / "index", passages, [tiny_sentence_model, tiny_sparse_model],
                    progress=False)
    cut = [str(w.message) for w in caught if "were cut" in str(w.message)]
    assert cut == ["4 of 30 texts were longer than 64 tokens and were cut"] * 2
