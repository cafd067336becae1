"""A static model's sentence vectors at once (bertkit.embeddings.static_pooling) equal the
Embedder's general path (the lookup through the encoder's interface, batched and pooled over
the known positions), cut texts and refusals included."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.embeddings.distill_static import DistillOptions, distill_static
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.standardize import unit_rows
from bertkit.embeddings.static_pooling import bag_means, encoded_means, known_pieces
from bertkit.files import UserError

TEXTS = ["we sat on the river bank .", "the bank raised rates", "unbelievable", "",
         "the cat sat on the mat", "xyz", "the [MASK] bank", "playing a river , the water"]


@pytest.fixture(scope="module")
def static(tiny_bert_dir, tmp_path_factory) -> Embedder:
    out = tmp_path_factory.mktemp("static") / "vectors"
    distill_static(DistillOptions(model=tiny_bert_dir, out=out, dims=8, device="cpu",
                                  quiet=True))
    return Embedder.load(out)


def _general(model: Embedder, texts: list[str]) -> np.ndarray:
    """The Embedder's batched path, which the static shortcut stands in for."""
    encoded = model.tokenize(texts)
    return model.pool_groups(encoded, [[model._pooled_positions(e)] for e in encoded], -1,
                             "mean", "mean", False, 3, False, "sentences")


def test_known_pieces_cut_then_leave_unknown_out():
    ids, starts, cut = known_pieces([[5, 1, 6, 7], [], [1], [8, 9]], unk_id=1, limit=3)
    assert ids.tolist() == [5, 6, 8, 9] and starts.tolist() == [0, 2, 2, 2, 4] and cut == 1
    ids, starts, cut = known_pieces([[5, 1, 6, 7]], unk_id=None, limit=None)
    assert ids.tolist() == [5, 1, 6, 7] and starts.tolist() == [0, 4] and cut == 0


def test_bag_means_are_each_text_s_mean_and_zeros_for_none():
    table = torch.arange(20, dtype=torch.float32).reshape(10, 2)
    got = bag_means(table, np.array([1, 3, 4]), np.array([0, 2, 2, 3]))
    want = torch.stack([(table[1] + table[3]) / 2, torch.zeros(2), table[4]])
    torch.testing.assert_close(got, want)


def test_encode_equals_the_general_path(static):
    want = unit_rows(_general(static, TEXTS))
    np.testing.assert_allclose(static.encode(TEXTS), want, atol=1e-6)
    np.testing.assert_allclose(static.embed(TEXTS, normalize=False), _general(static, TEXTS),
                               atol=1e-6)
    assert not static.encode(["xyz"]).any()  # no known piece: zeros, as model2vec gives


def test_pool_sentences_writes_the_same_into_out(static):
    encoded = static.tokenize(TEXTS)
    out = np.full((len(TEXTS), 8), 7.0, dtype=np.float32)
    static.pool_sentences(encoded, normalize=False, out=out)
    np.testing.assert_allclose(out, _general(static, TEXTS), atol=1e-6)
    np.testing.assert_allclose(encoded_means(static.encoder.embeddings.weight, encoded,
                                             static.tokenizer.unk_id), out, atol=0)


def test_cut_texts_are_cut_as_the_tokenizer_cuts_them(static, monkeypatch):
    monkeypatch.setattr(static, "max_length", 5)  # [CLS], 3 pieces, [SEP]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = static.embed(TEXTS, normalize=False)
    assert [str(w.message) for w in caught] == [
        "4 of 8 texts were longer than 5 tokens and were cut"]
    np.testing.assert_allclose(got, _general(static, TEXTS), atol=1e-6)
    with pytest.raises(UserError) as fast:
        static.embed(TEXTS, truncation=False)
    with pytest.raises(UserError) as general:
        static.tokenize(TEXTS, truncation=False)
    assert str(fast.value) == str(general.value)


def test_other_poolings_and_pairs_take_the_general_path(static):
    np.testing.assert_allclose(
        static.embed(TEXTS[:3], pool="max", normalize=False),
        static.pool_groups(static.tokenize(TEXTS[:3]), [[static._pooled_positions(e)] for e in
                                                        static.tokenize(TEXTS[:3])],
                           -1, "mean", "max", False, 3, False, "s"), atol=1e-6)
    assert static._static_mean(-1, None, False, TEXTS)
    assert not static._static_mean(-1, None, False, [("a", "b")])
    assert not static._static_mean(-1, "max", False, TEXTS)
