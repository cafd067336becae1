"""BM25 through bm25s: a block of queries at a time gives bm25s' own retrieve of them all; without
bm25s installed, --bm25 is one line saying what to install."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from bertkit.cli import main as cli
from bertkit.files import UserError
from bertkit.retrieval.bm25 import Bm25
from tests.retrieval.conftest import sentences

bm25s = pytest.importorskip("bm25s")


def test_blocks_of_queries_give_bm25s_own_retrieve():
    passages, queries = sentences(50, 0), sentences(11, 1, length=3)
    told = []
    scores, indices = Bm25(passages).top_k(queries, 8, block=4, done=told.append)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, stopwords="en", show_progress=False),
                    show_progress=False)
    found, top = retriever.retrieve(bm25s.tokenize(queries, stopwords="en", show_progress=False),
                                    k=8, show_progress=False)
    assert np.array_equal(indices, found) and np.array_equal(scores, top)
    assert told == [4, 4, 3] and bool((scores[:, 0] > 0).all())


def test_k_beyond_the_corpus_is_the_corpus():
    scores, indices = Bm25(sentences(5, 2)).top_k(sentences(2, 3), 100)
    assert indices.shape == (2, 5) and sorted(indices[0].tolist()) == list(range(5))


def test_without_bm25s_it_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(UserError, match=r"pip install 'bertkit\[retrieval\]'"):
        Bm25(["a passage"])


@pytest.mark.parametrize("command", ["mine", "evaluate"])
def test_the_commands_without_bm25s_say_what_to_install_and_write_nothing(
        command, tmp_path, capsys, monkeypatch):
    """bm25s is imported on use only: the commands run up to BM25, then one line."""
    monkeypatch.setitem(sys.modules, "bm25s", None)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": q, "positive": p}) + "\n"
                             for q, p in zip(sentences(6, 1), sentences(6, 2))))
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "p0", "text": "a passage"}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "a query"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tp0\t1\n")
    out = tmp_path / "mined.jsonl"
    args = ["mine", "--input", str(pairs), "--bm25", "--quiet", "--out", str(out)] \
        if command == "mine" else ["evaluate", "--input", str(beir), "--bm25", "--quiet"]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.err == ("error: --bm25 needs the bm25s library: pip install "
                            "'bertkit[retrieval]', or pip install -e '.[retrieval]' in a "
                            "checkout\n")
    assert captured.out == "" and not out.exists()
