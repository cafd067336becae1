"""Anisotropy, rogue dimensions and standardization on synthetic vectors with known answers,
then the whole report and the anisotropy command on a tiny model."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from bertkit.cli.main import main
from bertkit.embeddings.anisotropy import (anisotropy_report, cosine_contributions, cosine_matrix,
                                          expected_cosine, intra_sentence_similarity,
                                          rogue_dimensions, sample_lines, self_similarity)
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.standardize import STANDARDIZER_FILE, Standardizer, unit_rows
from bertkit.files import UserError


def brute_expected_cosine(x, groups):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    values = [u[i] @ u[j] for i, j in itertools.permutations(range(len(x)), 2)
              if groups[i] != groups[j]]
    return float(np.mean(values))


def test_expected_cosine_is_exact_over_pairs_of_different_groups():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 8)) + 0.5
    groups = rng.integers(0, 6, size=30)
    assert expected_cosine(x, groups) == pytest.approx(brute_expected_cosine(x, groups), abs=1e-12)
    assert expected_cosine(x) == pytest.approx(brute_expected_cosine(x, np.arange(30)), abs=1e-12)
    assert cosine_contributions(x, groups).sum() == pytest.approx(expected_cosine(x, groups))


def test_isotropic_vectors_have_zero_and_shared_offset_high_expected_cosine():
    rng = np.random.default_rng(1)
    isotropic = rng.normal(size=(4000, 64))
    assert abs(expected_cosine(isotropic)) < 0.01
    offset = isotropic + 8.0 * rng.normal(size=64)  # every vector shares one big direction
    assert expected_cosine(offset) > 0.9


def test_planted_rogue_dimensions_are_found_and_standardization_removes_them():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3000, 48))
    x[:, 7] += 20.0  # a large constant offset
    x[:, 30] = 12.0 + 3.0 * rng.normal(size=3000)  # large mean and large variance
    top = rogue_dimensions(x, k=3)
    assert {top[0].dim, top[1].dim} == {7, 30}
    assert top[0].share + top[1].share > 0.95
    assert expected_cosine(x) > 0.8

    z = Standardizer.fit([x], [0]).transform(x, 0)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(z.std(0), 1.0, atol=1e-5)
    assert abs(expected_cosine(z)) < 0.01
    assert np.abs(cosine_contributions(z)[[7, 30]]).max() < 0.001


def test_standardizer_layers_round_trip_and_torch(tmp_path):
    rng = np.random.default_rng(3)
    a, b = rng.normal(3.0, 2.0, (200, 6)), rng.normal(-1.0, 0.5, (200, 6))
    a[:, 2] = 5.0  # a constant dimension: centred, not divided by zero
    s = Standardizer.fit([a, b], [4, 6], source="synthetic")
    z = s.transform(a, 4)
    assert np.isfinite(z).all() and np.allclose(z[:, 2], 0.0)
    loaded = Standardizer.load(s.save(tmp_path / "s.safetensors"))
    assert loaded.layers == [4, 6] and loaded.count == 200 and loaded.source == "synthetic"
    np.testing.assert_allclose(loaded.transform(b, 6), s.transform(b, 6), atol=1e-6)
    np.testing.assert_allclose(loaded.transform_layer(torch.tensor(b, dtype=torch.float32), 6),
                               s.transform(b, 6), atol=1e-5)
    with pytest.raises(UserError, match="not 5"):
        s.transform(a, 5)
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(UserError, match="not a standardizer"):
        Standardizer.load(tmp_path / "bad.safetensors")


def test_self_and_intra_sentence_similarity_against_brute_force():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(24, 5)) + 1.0
    words = ["bank", "river", "money"] * 8
    groups = np.repeat(np.arange(6), 4)
    got, types = self_similarity(x, words, groups, min_count=5)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    per_type = []
    for w in set(words):
        rows = [i for i in range(24) if words[i] == w]
        per_type.append(np.mean([u[i] @ u[j] for i, j in itertools.permutations(rows, 2)
                                 if groups[i] != groups[j]]))
    assert types == 3 and got == pytest.approx(np.mean(per_type))

    intra = []
    for g in range(6):
        rows = x[groups == g]
        centre = rows.mean(0) / np.linalg.norm(rows.mean(0))
        intra.append(np.mean(rows @ centre / np.linalg.norm(rows, axis=1)))
    assert intra_sentence_similarity(x, groups) == pytest.approx(np.mean(intra))


def test_sample_lines(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"line {i}\n\n" for i in range(100)))
    picked = sample_lines(corpus, 10, seed=1)
    assert len(picked) == 10 and picked == sample_lines(corpus, 10, seed=1)
    assert picked == sorted(picked, key=lambda s: int(s.split()[1]))  # file order
    assert len(sample_lines(corpus, 500)) == 100
    # the words of every command's empty input, with why it is empty
    (tmp_path / "blank.txt").write_text("\n \n")
    (tmp_path / "blank.csv").write_text('id,text\n1,""\n2, \n')
    for name, why in (("blank.txt", "only blank lines"),
                      ("blank.csv", 'the field "text" is blank in every record')):
        with pytest.raises(UserError) as caught:
            sample_lines(tmp_path / name, 5)
        assert str(caught.value) == f"{tmp_path / name}: no text ({why})"


def test_unit_rows_and_cosine_matrix():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    u = unit_rows(x)
    assert u.dtype == np.float32 and unit_rows(x, np.float64).dtype == np.float64
    np.testing.assert_allclose(u, [[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]])  # zero rows stay zero
    np.testing.assert_allclose(unit_rows(np.array([0.0, 2.0])), [0.0, 1.0])  # one vector
    np.testing.assert_allclose(cosine_matrix(x), [[1, 0, -0.6], [0, 0, 0], [-0.6, 0, 1]],
                               atol=1e-7)


def test_report_on_a_tiny_model(embedder, sentences):
    texts = sentences * 3
    report, standardizer = anisotropy_report(embedder, texts, min_count=3)
    assert [s.layer for s in report.layers] == [0, 1, 2, 3]
    assert standardizer.layers == [0, 1, 2, 3] and standardizer.count == report.words
    # Every figure is the measure applied to the words' vectors of that layer.
    vectors, refs = embedder.words(texts, layers="all", combine="concat")
    groups = np.array([r.item for r in refs])
    for k, s in enumerate(report.layers):
        x = vectors[:, 32 * k:32 * (k + 1)]
        assert s.anisotropy == pytest.approx(expected_cosine(x, groups), abs=1e-9)
        z = standardizer.transform(x, s.layer)
        assert s.anisotropy_std == pytest.approx(expected_cosine(z, groups), abs=1e-9)
        assert abs(s.anisotropy_std) < abs(s.anisotropy) + 0.05
        assert [r.dim for r in s.rogue] == [r.dim for r in rogue_dimensions(x, 3, groups)]
    assert "| 3 |" in report.table()


def test_anisotropy_command_fits_a_standardizer_for_embed(make_tiny_bert, sentences, tmp_path,
                                                          capsys):
    # Its own model: the command writes the standardizer into the model directory.
    model_dir = make_tiny_bert(tmp_path / "model")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences * 4) + "\n")
    png = tmp_path / "a.png"
    assert main(["anisotropy", "--model", str(model_dir), "--input", str(corpus), "--json",
                 "--plot", str(png), "--fit-standardizer", "--min-count", "2", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["layers"]) == 4 and report["sentences"] == len(sentences) * 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (model_dir / STANDARDIZER_FILE).is_file()
    out = tmp_path / "z.npy"
    assert main(["embed", "--model", str(model_dir), "--input", str(corpus), "--out", str(out),
                 "--words", "--standardize", "--quiet"]) == 0
    z = np.load(out)
    # Standardized with the statistics of these same words: zero mean, unit variance.
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(z.std(0), 1.0, atol=1e-3)
    # A standardizer fitted elsewhere evaluates this corpus as held-out data.
    assert main(["anisotropy", "--model", str(model_dir), "--input", str(corpus), "--json",
                 "--standardizer", str(model_dir / STANDARDIZER_FILE), "--sentences", "3",
                 "--min-count", "2", "--quiet"]) == 0
    held_out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert held_out["standardized_with"].startswith("corpus.txt")
    (model_dir / STANDARDIZER_FILE).unlink()
    (tmp_path / "empty.txt").write_text("")
    assert main(["anisotropy", "--model", str(model_dir), "--input",
                 str(tmp_path / "empty.txt")]) == 2
    assert "is empty" in capsys.readouterr().err
    assert main(["anisotropy", "--model", str(model_dir), "--input", str(corpus),
                 "--sentences", "0"]) == 2  # was: "no text in the corpus (only blank lines)"
    assert capsys.readouterr().err == "error: --sentences must be at least 1, got 0\n"


def test_a_standardizer_of_another_width_or_shape_names_its_file(tmp_path, embedder, sentences):
    rng = np.random.default_rng(0)
    narrow = Standardizer.fit([rng.normal(size=(20, 16))], [2]).save(tmp_path / "n.safetensors")
    loaded = Standardizer.load(narrow)
    with pytest.raises(UserError, match=rf"^{narrow}: the standardizer was fitted on vectors of "
                                        r"width 16, but these have 32"):
        Embedder(embedder.encoder, embedder.tokenizer, standardizer=loaded)
    with pytest.raises(UserError, match=rf"^{narrow}: the standardizer was fitted on vectors"):
        loaded.transform(rng.normal(size=(3, 32)), 2)
    save_file({"mean": np.zeros((2, 32), np.float32), "std": np.ones((1, 32), np.float32),
               "layers": np.array([1, 2])}, str(tmp_path / "odd.safetensors"))
    with pytest.raises(UserError, match=r"odd.safetensors: not a standardizer file \(mean"):
        Standardizer.load(tmp_path / "odd.safetensors")
    save_file({"mean": np.zeros((1, 32), np.float32), "std": np.zeros((1, 32), np.float32),
               "layers": np.array([1])}, str(tmp_path / "zero.safetensors"))
    with pytest.raises(UserError, match=r"zero.safetensors: .*a std that is not positive"):
        Standardizer.load(tmp_path / "zero.safetensors")
