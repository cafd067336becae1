"""`bertkit index` and `bertkit search` from the command line, and `evaluate` fusing models on
a BEIR directory: the results are the library's, and bad input is one line, exit 2, nothing
written."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.cli import main as cli
from bertkit.retrieval.beir import read_passages
from bertkit.retrieval.evaluation import evaluate_beir
from bertkit.retrieval.fusion import ReciprocalRank
from bertkit.retrieval.corpus_index import Index, Searcher
from bertkit.retrieval.reranking import load_reranker
from bertkit.retrieval.retrievers import Bm25Retriever, open_model

from tests.retrieval.conftest import (sentences, tiny_reranker, tiny_sentence_model,  # noqa: F401
                                      tiny_sparse_model)
from tests.retrieval.test_beir import _beir


def corpus_file(path, n=50):
    path.write_text("".join(json.dumps({"_id": f"doc{i}", "title": "", "text": t}) + "\n"
                            for i, t in enumerate(sentences(n, 3))))
    return path


@pytest.fixture
def index_dir(tmp_path, tiny_sentence_model, tiny_sparse_model, capsys):
    corpus = corpus_file(tmp_path / "corpus.jsonl")
    out = tmp_path / "index"
    assert cli.main(["index", "--input", str(corpus), "--model", str(tiny_sentence_model),
                     "--model", str(tiny_sparse_model), "--bm25", "--out", str(out),
                     "--device", "cpu", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: 50 passages by dense (")
    return out


def test_search_writes_the_searchers_results(index_dir, tmp_path, tiny_reranker, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("river bank\n\nstone ship king\n")
    out = tmp_path / "found.jsonl"
    assert cli.main(["search", "--index", str(index_dir), "--input", str(queries),
                     "--query", "rain cloud", "--fusion", "rrf", "--rerank", str(tiny_reranker),
                     "--rerank-top", "15", "--top-k", "4", "--out", str(out),
                     "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    texts = ["rain cloud", "river bank", "stone ship king"]
    assert [r["query"] for r in rows] == texts
    hits = Searcher(Index.load(index_dir), ReciprocalRank(), load_reranker(tiny_reranker),
                    15).search(texts, 4)
    for row, found in zip(rows, hits):
        assert row["ids"] == [h.id for h in found] and row["texts"] == [h.text for h in found]
        assert row["scores"] == pytest.approx([h.score for h in found], abs=1e-5)
    assert cli.main(["search", "--index", str(index_dir), "--query", "river bank",
                     "--fusion", "sum", "--weights", "1", "0.5", "2", "--top-k", "3"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("query: river bank\n") and len(table.splitlines()) == 5


def test_search_reranks_in_bf16_when_asked(index_dir, tmp_path, tiny_reranker):
    """--precision bf16 is the reranker's: its logits are the library's bf16 reranker's, and
    they are not the fp32 ones (so the flag reached the model)."""
    out = tmp_path / "found.jsonl"
    assert cli.main(["search", "--index", str(index_dir), "--query", "river bank",
                     "--fusion", "rrf", "--rerank", str(tiny_reranker), "--top-k", "5",
                     "--precision", "bf16", "--out", str(out), "--device", "cpu"]) == 0
    row = json.loads(out.read_text())
    index = Index.load(index_dir)
    fast, exact = (Searcher(index, ReciprocalRank(), load_reranker(tiny_reranker,
                                                                   precision=precision),
                            20).search(["river bank"], 5)[0] for precision in ("bf16", "fp32"))
    assert row["ids"] == [h.id for h in fast]
    assert row["scores"] == pytest.approx([h.score for h in fast], abs=1e-6)
    assert [h.score for h in fast] != pytest.approx([h.score for h in exact], abs=1e-6)
    assert [h.score for h in fast] == pytest.approx([h.score for h in exact], abs=0.05)


def test_index_encodes_passages_in_bf16_when_asked(tmp_path, tiny_sentence_model,
                                                   tiny_sparse_model):
    """--precision bf16 reaches both models: the index holds the bf16 library's vectors, not
    the fp32 ones."""
    import scipy.sparse

    corpus = corpus_file(tmp_path / "corpus.jsonl", 20)
    out = tmp_path / "index"
    assert cli.main(["index", "--input", str(corpus), "--model", str(tiny_sentence_model),
                     "--model", str(tiny_sparse_model), "--precision", "bf16", "--out",
                     str(out), "--device", "cpu", "--quiet"]) == 0
    texts = read_passages(corpus).texts
    entries = json.loads((out / "index.json").read_text())["retrievers"]
    dense = np.load(out / entries[0]["file"])
    sparse = scipy.sparse.load_npz(out / entries[1]["file"]).toarray()
    for got, model in ((dense, tiny_sentence_model), (sparse, tiny_sparse_model)):
        fast, exact = (open_model(model, "cpu", precision) for precision in ("bf16", "fp32"))
        for retriever in (fast, exact):
            retriever.index(texts, progress=False)
        want, other = (r.vectors.numpy() if r.kind == "dense" else r.matrix.toarray()
                       for r in (fast, exact))
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert np.abs(got - other).max() > 1e-6  # fp32 twice would be equal


def test_evaluate_fuses_and_reranks_as_the_library_does(tmp_path, tiny_sentence_model,
                                                       tiny_sparse_model, tiny_reranker,
                                                       capsys):
    path = _beir(tmp_path)
    assert cli.main(["evaluate", "--input", str(path), "--model", str(tiny_sentence_model),
                     "--model", str(tiny_sparse_model), "--bm25", "--fusion", "rrf",
                     "--rerank", str(tiny_reranker), "--rerank-top", "30", "--json", "--quiet",
                     "--device", "cpu"]) == 0
    ours = json.loads(capsys.readouterr().out)
    theirs = evaluate_beir(path, retrievers=[open_model(tiny_sentence_model),
                                             open_model(tiny_sparse_model), Bm25Retriever()],
                           fusion=ReciprocalRank(), reranker=load_reranker(tiny_reranker),
                           rerank_top=30, progress=False)
    assert ours == pytest.approx(theirs.as_dict(), abs=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["--model", "M", "--fusion", "rrf"], "--fusion rrf fuses two or more retrievers; there is 1"),
    (["--model", "M", "--bm25"], "2 retrievers: give --fusion (rrf or sum)"),
    (["--model", "M", "--weights", "1"], "--weights are the weighted sum's"),
    (["--bm25", "--rerank", "M"], "a BERT encoder, not a fine-tuned task model"),
])
def test_evaluate_on_a_beir_directory_refuses_bad_combinations(tmp_path, tiny_sentence_model,
                                                               argv, message, capsys):
    path = _beir(tmp_path)
    argv = [str(tiny_sentence_model) if a == "M" else a for a in argv]
    assert cli.main(["evaluate", "--input", str(path), *argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1


def test_bad_input_is_one_line_and_nothing_written(tmp_path, index_dir, tiny_sentence_model,
                                                  capsys):
    corpus = corpus_file(tmp_path / "dup.jsonl", 5)
    with open(corpus, "a") as f:
        f.write(json.dumps({"_id": "doc2", "text": "again"}) + "\n")
    out = tmp_path / "never"
    assert cli.main(["index", "--input", str(corpus), "--bm25", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"error: {corpus}:6: duplicate id 'doc2', first at "
                                       f"{corpus}:3\n")
    assert not out.exists()
    cases = [
        (["index", "--input", str(corpus), "--out", str(out)], "give a model to index with"),
        (["search", "--index", str(tmp_path), "--query", "x"], "not an index directory"),
        (["search", "--index", str(index_dir), "--query", "x"], "give --fusion (rrf or sum)"),
        (["search", "--index", str(index_dir)], "give a query"),
        (["search", "--index", str(index_dir), "--query", "x", "--fusion", "rrf", "--rerank",
          str(tiny_sentence_model)], "a BERT encoder, not a fine-tuned task model"),
        (["search", "--index", str(index_dir), "--query", "x", "--fusion", "sum", "--weights",
          "1", "2", "--out", str(tmp_path / "f.jsonl")], "2 given for 3 retrievers"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err
    assert not out.exists() and not (tmp_path / "f.jsonl").exists()
    one = tmp_path / "one"
    assert cli.main(["index", "--input", str(corpus_file(tmp_path / "c.jsonl", 8)), "--bm25",
                     "--out", str(one), "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["search", "--index", str(one), "--query", "x", "--fusion", "rrf"]) == 2
    assert "--fusion rrf fuses two or more retrievers; there is 1" in capsys.readouterr().err
    assert read_passages(tmp_path / "c.jsonl").ids == Index.load(one).ids
