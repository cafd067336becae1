"""The search view of `bertkit serve` through its JSON API: each model's nearest lines equal a
brute-force cosine over `Embedder.encode` of the lines (a sentence model's own pooling, a
plain encoder's mean), line numbers of the file, vectors made once, the limits and bad
requests (4xx, one sentence), and the command line's start-up encoding."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.sentence_model import sentence_model_files
from bertkit.serve.app import make_app
from bertkit.serve.workbench import Limits, Workbench

from fastapi.testclient import TestClient  # noqa: E402  (fastapi: conftest's importorskip)

QUERY = "we sat on the river bank"


@pytest.fixture(scope="module")
def sentence_dirs(served, tmp_path_factory) -> tuple[Path, Path]:
    """Two sentence-transformers directories over the tiny BERT's weights: one with the encoder
    alone (max pooling, normalized), one that keeps the trained masked-LM head ([CLS]
    pooling, normalized), which the server loads for fill-mask too."""
    root = tmp_path_factory.mktemp("search")
    base = Embedder.load(served.bert)
    pure = Embedder(base.encoder, base.tokenizer, pool="max", normalize=True)
    pure.save(root / "maxpooled")
    both = root / "clspooled"
    shutil.copytree(served.bert, both)
    for name, data in sentence_model_files(("cls",), True, 64,
                                           base.config.hidden_size).items():
        (both / name).parent.mkdir(parents=True, exist_ok=True)
        (both / name).write_bytes(data)
    return root / "maxpooled", both


@pytest.fixture(scope="module")
def lines_file(served, tmp_path_factory) -> Path:
    """The corpus with blank lines among its lines: line numbers are the file's."""
    lines = served.corpus.read_text(encoding="utf-8").splitlines()[:120]
    with_blanks = [x for i, line in enumerate(lines) for x in ([line, ""] if i % 7 == 3
                                                                else [line])]
    path = tmp_path_factory.mktemp("lines") / "lines.txt"
    path.write_text("\n".join(with_blanks) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bench(sentence_dirs, served, lines_file) -> Workbench:
    return Workbench.load([*sentence_dirs, served.bert, served.classifier], corpus=lines_file,
                          limits=Limits(search_k=20))


@pytest.fixture(scope="module")
def client(bench):
    with TestClient(make_app(bench)) as c:
        yield c


def numbered_lines(path: Path) -> tuple[list[str], list[int]]:
    rows = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1)
            if line.strip()]
    return [line for _, line in rows], [n for n, _ in rows]


def brute_force(embedder: Embedder, lines: list[str], query: str) -> np.ndarray:
    """Every line's cosine to the query, in float64, from the library's own vectors."""
    m = embedder.encode(lines).astype(np.float64)
    q = embedder.encode([query])[0].astype(np.float64)
    return m @ q / np.linalg.norm(m, axis=1) / np.linalg.norm(q)


def assert_top_k(results: list[dict], cos: np.ndarray, numbers: list[int], k: int) -> None:
    """`results` are the k best lines of `cos`, best first, with their cosines (where two
    lines are within float32 rounding of each other, either order is right)."""
    assert len(results) == k
    index = {n: i for i, n in enumerate(numbers)}
    shown = np.array([r["cosine"] for r in results])
    picked = np.array([index[r["line"]] for r in results])
    np.testing.assert_allclose(shown, cos[picked], atol=2e-6)
    assert (np.diff(shown) <= 1e-6).all()
    best = np.sort(cos)[::-1]
    np.testing.assert_allclose(shown, best[:k], atol=2e-6)
    exact = np.argsort(-cos, kind="stable")[:k]
    gaps = np.abs(np.diff(best[:k + 1]))
    if (gaps > 1e-5).all():  # no near ties: the very same lines in the very same order
        assert [r["line"] for r in results] == [numbers[i] for i in exact]


def test_info_says_which_models_are_sentence_models(client, lines_file):
    info = client.get("/api/info").json()
    models = {m["name"]: m for m in info["models"]}
    assert models["maxpooled"]["sentence_model"] and models["clspooled"]["sentence_model"]
    assert not models["bert2018"]["sentence_model"] and models["bert2018"]["search"]
    assert models["clspooled"]["fill_mask"]  # its trained head still guesses
    assert "own pooling (max, normalized)" in models["maxpooled"]["search_vectors"]
    assert "own pooling (cls, normalized)" in models["clspooled"]["search_vectors"]
    assert "not a sentence model: the mean" in models["bert2018"]["search_vectors"]
    lines, _ = numbered_lines(lines_file)
    assert {k: info["search"][k] for k in ("source", "lines", "more")} == \
        {"source": "lines.txt", "lines": len(lines), "more": False}
    assert info["limits"]["search_k"] == 20


@pytest.mark.parametrize("name,which", [("maxpooled", 0), ("clspooled", 1), ("bert2018", None)])
def test_nearest_lines_equal_a_brute_force_cosine(client, sentence_dirs, served, lines_file,
                                                  name, which):
    path = served.bert if which is None else sentence_dirs[which]
    answer = client.post("/api/search", json={"query": QUERY, "k": 7, "models": [name]}).json()
    (model,) = answer["models"]
    assert model["name"] == name and model["sentence_model"] == (which is not None)
    lines, numbers = numbered_lines(lines_file)
    cos = brute_force(Embedder.load(path), lines, QUERY)
    assert_top_k(model["results"], cos, numbers, 7)
    for hit in model["results"]:
        assert hit["text"] == lines[numbers.index(hit["line"])]
    assert answer["query"] == QUERY and answer["k"] == 7 and answer["lines"] == len(lines)


def test_the_directory_pooling_is_used_and_models_sit_side_by_side(client):
    answer = client.post("/api/search", json={"query": QUERY, "k": 5}).json()
    assert [m["name"] for m in answer["models"]] == ["maxpooled", "clspooled"]  # the default
    mean = client.post("/api/search", json={"query": QUERY, "k": 5,
                                            "models": ["bert2018", "clspooled"]}).json()
    cls, plain = mean["models"][1], mean["models"][0]
    assert cls["results"] == answer["models"][1]["results"]
    # the same weights, pooled by [CLS] or by the mean: other cosines
    assert [h["cosine"] for h in cls["results"]] != [h["cosine"] for h in plain["results"]]
    assert all(-1 - 1e-6 <= h["cosine"] <= 1 + 1e-6 for h in plain["results"])
    fine_tuned = client.post("/api/search", json={"query": QUERY, "k": 3,
                                                  "models": ["classifier"]}).json()
    assert len(fine_tuned["models"][0]["results"]) == 3


def test_vectors_are_computed_once_and_kept(sentence_dirs, lines_file):
    bench = Workbench.load([sentence_dirs[0]], corpus=lines_file)
    embedder = bench.models["maxpooled"].embedder
    calls = []
    original = embedder.encode

    def counted(texts, *args, **kwargs):
        calls.append(len(texts))
        return original(texts, *args, **kwargs)

    embedder.encode = counted
    first = bench.search(QUERY, 3)
    matrix = bench.line_index.vectors["maxpooled"]
    second = bench.search("the dog was green", 3)
    n = len(bench.line_index.lines)
    assert calls == [n, 1, 1]  # the lines once, then each query alone
    assert bench.line_index.vectors["maxpooled"] is matrix
    assert matrix.dtype == np.float32 and matrix.shape == (n, embedder.config.hidden_size)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1, atol=1e-5)
    assert first["models"][0]["encode_s"] >= 0 and "encode_s" not in second["models"][0]
    assert first["encoded"] == ["maxpooled"]


def test_search_lines_reads_the_first_lines_with_their_numbers(sentence_dirs, lines_file):
    bench = Workbench.load([sentence_dirs[0]], corpus=lines_file, search_lines=5)
    lines, numbers = numbered_lines(lines_file)
    assert bench.line_index.lines == lines[:5] and bench.line_index.numbers == numbers[:5]
    assert numbers[:5] == [1, 2, 3, 4, 6]  # line 5 is blank
    answer = bench.search(QUERY, 10)
    assert answer["more"] is True and answer["lines"] == 5
    assert sorted(h["line"] for h in answer["models"][0]["results"]) == numbers[:5]
    assert Workbench.load([sentence_dirs[0]], corpus=lines_file, search_lines=0) \
        .line_index is None


def test_search_lines_of_no_text_say_why(tmp_path):
    """The words of every command's empty input (`tokenizer train`, `prepare`, ...)."""
    from bertkit.files import UserError
    from bertkit.serve.search import LineIndex

    (tmp_path / "blank.txt").write_text("\n \n")
    (tmp_path / "blank.csv").write_text('id,text\n1,""\n2, \n')
    for name, why in (("blank.txt", "only blank lines"),
                      ("blank.csv", 'the field "text" is blank in every record')):
        with pytest.raises(UserError) as caught:
            LineIndex.read(tmp_path / name, 10)
        assert str(caught.value) == f"{tmp_path / name}: no text ({why})"


@pytest.mark.parametrize("body,status,words", [
    ({"query": ""}, 400, "query is empty"),
    ({"query": "   "}, 400, "query is empty"),
    ({"query": "x" * 2001}, 413, "at most 2000"),
    ({"query": 5}, 400, "query must be a string"),
    ({"query": "a", "k": 21}, 400, "k must be a whole number from 1 to 20"),
    ({"query": "a", "k": 0}, 400, "from 1 to 20"),
    ({"query": "a", "k": "5"}, 400, "k must be"),
    ({"query": "a", "k": True}, 400, "k must be"),
    ({"query": "a", "models": ["nope"]}, 404, "no model named"),
    ({"query": "a", "models": []}, 400, "name one or more"),
    ({"query": "a", "models": "maxpooled"}, 400, "list of model names"),
])
def test_bad_searches_get_one_sentence_and_a_4xx(client, body, status, words):
    answer = client.post("/api/search", json=body)
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]
    assert words in message and "\n" not in message and "Traceback" not in message


def test_a_server_without_input_says_how_to_search(sentence_dirs):
    with TestClient(make_app(Workbench.load([sentence_dirs[0]]))) as c:
        assert c.get("/api/info").json()["search"] is None
        answer = c.post("/api/search", json={"query": "a"})
    assert answer.status_code == 400 and "--input FILE" in answer.json()["error"]


def test_serve_encodes_the_sentence_models_at_start_up(monkeypatch, capsys, sentence_dirs,
                                                       served, lines_file):
    seen = {}

    def fake_serve(workbench, host, port, announce):
        seen["encoded"] = sorted(workbench.line_index.vectors)

    monkeypatch.setattr("bertkit.serve.app.serve", fake_serve)
    assert main(["serve", "--model", str(sentence_dirs[0]), "--model", str(served.bert),
                 "--input", str(lines_file), "--search-lines", "50", "--port", "0"]) == 0
    assert seen == {"encoded": ["maxpooled"]}  # the plain encoder waits for its first search
    err = capsys.readouterr().err
    assert "search: maxpooled: encoding 50 lines of lines.txt" in err
    assert "search: maxpooled: 50 vectors of" in err
    assert "maxpooled: encoder" in err and "views: attention, embeddings, search" in err
    for argv, words in ((["--search-lines", "-1"], "--search-lines must be at least 0"),
                        (["--max-search-k", "0"], "--max-search-k must be at least 1")):
        assert main(["serve", "--model", str(served.bert), *argv]) == 2
        assert words in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_real_minilm_finds_the_line_that_means_the_same(minilm_dir, tmp_path):
    lines = ["The stock market fell sharply this morning.", "",
             "A man is playing a guitar on the stage.",
             "The chef is cooking pasta in the kitchen.",
             "Children are playing football in the park.",
             "Heavy rain is expected over the weekend."]
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bench = Workbench.load([minilm_dir], corpus=path)
    assert bench.models["model"].sentence
    answer = bench.search("Someone performs music with an instrument.", 5)
    hits = answer["models"][0]["results"]
    assert hits[0]["line"] == 3 and "guitar" in hits[0]["text"]
    texts, numbers = numbered_lines(path)
    cos = brute_force(Embedder.load(minilm_dir), texts,
                      "Someone performs music with an instrument.")
    assert_top_k(hits, cos, numbers, 5)
    assert bench.search("Will it rain on Saturday?", 1)["models"][0]["results"][0]["line"] == 6
