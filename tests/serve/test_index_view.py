"""The index search view of `bertkit serve --index`: its answers are the Searcher's (the
retrievers fused, the top reranked, as `bertkit search` gives them), through the JSON API,
with its limits and bad requests (4xx, one sentence), and the command line's checks."""
from __future__ import annotations

import json

import pytest

from bertkit.cli.main import main
from bertkit.retrieval.beir import Passages
from bertkit.retrieval.corpus_index import Index, Searcher, build_index
from bertkit.retrieval.fusion import ReciprocalRank
from bertkit.serve.app import ServeOptions, make_app
from bertkit.serve.workbench import Limits, RequestError, Workbench

from fastapi.testclient import TestClient  # noqa: E402  (fastapi: conftest's importorskip)


@pytest.fixture(scope="module")
def index_dir(served, tmp_path_factory):
    texts = served.corpus.read_text().splitlines()[:60]
    passages = Passages([f"line{i + 1}" for i in range(len(texts))], texts, [])
    out = tmp_path_factory.mktemp("index") / "index"
    build_index(out, passages, [served.bert], bm25=True, progress=False)
    return out


def test_the_api_answers_as_the_searcher_does(index_dir, served):
    bench = Workbench.load([served.bert], limits=Limits(search_k=20))
    bench.searcher = Searcher(Index.load(index_dir), ReciprocalRank())
    client = TestClient(make_app(bench))
    info = client.get("/api/info").json()["index"]
    assert info == {"passages": 60, "retrievers": [f"dense ({served.bert})", "bm25"],
                    "fusion": "reciprocal-rank fusion (k 60)", "rerank_top": 0}
    answer = client.post("/api/index-search", json={"query": "river bank money", "k": 5})
    assert answer.status_code == 200
    found = answer.json()
    expected = bench.searcher.search(["river bank money"], 5)[0]
    assert [r["id"] for r in found["results"]] == [h.id for h in expected]
    assert [r["text"] for r in found["results"]] == [h.text for h in expected]
    assert [r["rank"] for r in found["results"]] == [1, 2, 3, 4, 5]
    for k in (0, 21, "5", True):
        bad = client.post("/api/index-search", json={"query": "river", "k": k})
        assert bad.status_code == 400 and "k must be a whole number from 1 to 20" in \
            bad.json()["error"]
    assert client.post("/api/index-search", json={"query": " "}).status_code == 400


def test_a_server_without_an_index_says_how_to_start_one(workbench):
    with pytest.raises(RequestError, match="start it with --index DIR"):
        workbench.index_search("river")
    assert workbench.describe()["index"] is None


def test_the_command_line_checks_the_index_before_loading_a_model(tmp_path, capsys, index_dir):
    assert main(["serve", "--index", str(tmp_path)]) == 2
    assert "not an index directory" in capsys.readouterr().err
    assert main(["serve", "--run", str(tmp_path), "--fusion", "rrf"]) == 2
    assert "--fusion and --rerank are of the index search: give --index DIR" in \
        capsys.readouterr().err
    opts = ServeOptions(index=index_dir, fusion="rrf", device="cpu")
    searcher = opts.searcher()
    assert [r.kind for r in searcher.index.retrievers] == ["dense", "bm25"]
    assert json.loads((index_dir / "index.json").read_text())["passages"] == 60
