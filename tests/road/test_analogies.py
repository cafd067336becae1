"""Analogies (a - b + c), their accuracy on a file, and words on the plane of their first two
principal components; the `static train|analogy|plot` commands end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bertkit.cli.main as cli
from bertkit.embeddings.pca import pca
from bertkit.embeddings.static import StaticVectors, Tokenization
from bertkit.files import UserError
from bertkit.road.analogies import analogy_accuracy, plot_words, read_analogies


def _toy_vectors() -> StaticVectors:
    words = {"king": [1, 0, 1], "man": [1, 0, 0], "woman": [0, 1, 0], "queen": [0, 1, 1],
             "apple": [0, 0, -1], "prince": [0.9, 0.1, 0.9]}
    return StaticVectors(list(words), np.ones(len(words)), np.array(list(words.values()),
                                                                    dtype=np.float32),
                         Tokenization())


def test_analogy_answers_and_leaves_the_inputs_out():
    vectors = _toy_vectors()
    assert vectors.analogy("king", "man", "woman")[0][0] == "queen"
    # king - prince + woman is nearly woman itself: the inputs may never be the answer.
    answers = [w for w, _ in vectors.analogy("king", "prince", "woman", k=5)]
    assert {"king", "prince", "woman"}.isdisjoint(answers) and answers[0] == "queen"
    cos = vectors.analogy("king", "man", "woman")[0][1]
    target = sum(v / np.linalg.norm(v) * s for v, s in
                 ((vectors.vector("king"), 1), (vectors.vector("man"), -1),
                  (vectors.vector("woman"), 1)))
    q = vectors.vector("queen")
    assert cos == pytest.approx(target @ q / np.linalg.norm(target) / np.linalg.norm(q),
                                abs=1e-6)


def test_analogy_file_and_accuracy(tmp_path):
    path = tmp_path / "analogies.txt"
    path.write_text("# a - b + c = d\nking man woman queen\nqueen woman man apple\n"
                    "king man woman zebra\n", encoding="utf-8")
    report = analogy_accuracy(_toy_vectors(), read_analogies(path))
    assert (report["correct"], report["answered"], report["skipped"]) == (1, 2, 1)
    assert report["accuracy"] == 0.5
    path.write_text("king man woman\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"analogies.txt:1: expected four words"):
        read_analogies(path)


def test_plot_words(tmp_path):
    out = tmp_path / "words.png"
    words = ["king", "queen", "man", "woman"]
    points = plot_words(_toy_vectors(), words, out)
    assert points.shape == (4, 2) and out.read_bytes()[:4] == b"\x89PNG"
    expected, _ = pca(np.stack([_toy_vectors().vector(w) for w in words]))
    np.testing.assert_allclose(points, expected)  # the one PCA, its sign fixed
    with pytest.raises(UserError, match="at least three"):
        plot_words(_toy_vectors(), ["king", "queen"], out)
    with pytest.raises(UserError, match="not in the vocabulary"):
        plot_words(_toy_vectors(), ["king", "queen", "zebra"], tmp_path / "other.png")
    assert not (tmp_path / "other.png").exists()


def test_cli(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    corpus.write_text("".join(" ".join(rng.choice(["king", "man", "woman", "queen", "apple",
                                                   "pear"], 6)) + "\n" for _ in range(200)),
                      encoding="utf-8")
    out = tmp_path / "vec"
    assert cli.main(["static", "train", "--input", str(corpus), "--architecture", "cbow",
                     "--loss", "softmax", "--dim", "8", "--epochs", "1", "--min-count", "1",
                     "--subsample", "0", "--out", str(out), "--quiet"]) == 0
    assert "words x 8 dimensions" in capsys.readouterr().out
    assert StaticVectors.load(out).config["architecture"] == "cbow"
    assert cli.main(["static", "analogy", "--vectors", str(out), "--top-k", "2",
                     "king", "man", "woman"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("king - man + woman = ") and "king " not in line.split("=")[1]
    assert cli.main(["static", "analogy", "--vectors", str(out), "king", "man"]) == 2
    assert "give three words" in capsys.readouterr().err
    questions = tmp_path / "q.txt"
    questions.write_text("king man woman queen\n", encoding="utf-8")
    assert cli.main(["static", "analogy", "--vectors", str(out), "--input", str(questions),
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["answered"] == 1
    assert cli.main(["static", "plot", "--vectors", str(out), "--out", str(tmp_path / "p.png"),
                     "king", "queen", "man", "woman"]) == 0
    assert (tmp_path / "p.png").is_file()
