"""model_kind: each kind of model directory, as its own writer leaves it, is told apart; anything
else is one UserError naming the path."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.static import StaticVectors, Tokenization
from bertkit.files import UserError
from bertkit.model import hub
from bertkit.model.elmo import ElmoConfig, ElmoLM, load_elmo, save_elmo
from bertkit.model.encoder import Encoder, EncoderConfig
from bertkit.model.kind import ModelKind, model_kind, require_kind
from bertkit.road.entities import (Categories, Recommender, RecommenderConfig, load_recommender,
                                   save_recommender)
from bertkit.road.seq2seq import Seq2Seq, Seq2SeqConfig, load_seq2seq, save_seq2seq
from bertkit.text.vocab import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    text = tmp_path_factory.mktemp("text") / "text.txt"
    text.write_text("the cat sat on the mat\na dog ran to the park\n" * 20)
    return train_tokenizer([text], 40, progress=False)


def _encoder() -> Encoder:
    return Encoder(EncoderConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2,
                                 intermediate_size=32, max_positions=16))


def test_an_encoder_checkpoint(tmp_path):
    hub.save_model(_encoder(), tmp_path / "m")
    assert model_kind(tmp_path / "m") is ModelKind.ENCODER


def test_a_sentence_transformers_directory_is_an_encoder(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "modules.json").write_text("[]")
    assert model_kind(tmp_path / "m") is ModelKind.ENCODER


def test_a_transformers_task_model_and_a_bertkit_one(tmp_path):
    hub.save_model(_encoder(), tmp_path / "hf", architectures=["BertForTokenClassification"])
    assert model_kind(tmp_path / "hf") is ModelKind.TASK
    hub.save_model(_encoder(), tmp_path / "ours", extra_files={
        "bertkit_task.json": json.dumps({"task": "classify"}).encode()})
    assert model_kind(tmp_path / "ours") is ModelKind.TASK
    # a head transformers writes that no bertkit task reads stays an encoder
    hub.save_model(_encoder(), tmp_path / "mlm", architectures=["BertForMaskedLM"])
    assert model_kind(tmp_path / "mlm") is ModelKind.ENCODER


def test_a_cnn_is_not_taken_for_the_task_model_it_also_is(tmp_path):
    d = tmp_path / "cnn"
    d.mkdir()
    for name in ("bertkit_task.json", "cnn.json", "cnn.safetensors"):
        (d / name).write_text("{}")
    assert model_kind(d) is ModelKind.CNN
    (d / "cnn.safetensors").unlink()  # half a CNN is not one
    with pytest.raises(UserError, match="not a model directory"):
        model_kind(d)


def test_elmo(tmp_path, tokenizer):
    cfg = ElmoConfig(vocab_size=tokenizer.vocab_size, embed_dim=4, lstm_dim=6, num_layers=1)
    save_elmo(ElmoLM(cfg, torch.Generator().manual_seed(0)), tokenizer, tmp_path / "elmo")
    assert model_kind(tmp_path / "elmo") is ModelKind.ELMO


def test_static_vectors(tmp_path):
    vectors = StaticVectors(["a", "b", "c"], np.array([3, 2, 1]),
                            np.eye(3, dtype=np.float32), Tokenization())
    vectors.save(tmp_path / "static")
    assert model_kind(tmp_path / "static") is ModelKind.STATIC
    # the Embedder takes encoders, task models and ELMo, and says so
    with pytest.raises(UserError, match=r"static: static word vectors \(static train\), not a "
                                        r"BERT encoder or a fine-tuned task model or an ELMo"):
        Embedder.load(tmp_path / "static")


def test_static_sentence_vectors_are_not_taken_for_the_encoder_they_look_like(tmp_path,
                                                                               tokenizer):
    from bertkit.model.static_encoder import load_static_encoder, save_static

    vectors = np.ones((tokenizer.vocab_size, 3), dtype=np.float32)
    save_static(tmp_path / "static", vectors, tokenizer, {"normalize": True})
    assert (tmp_path / "static" / "modules.json").is_file()  # as a sentence-transformers one
    assert model_kind(tmp_path / "static") is ModelKind.STATIC_SENTENCE
    assert load_static_encoder(tmp_path / "static").config.hidden_size == 3
    (tmp_path / "static" / "modules.json").unlink()  # model2vec's older layout: config.json
    assert model_kind(tmp_path / "static") is ModelKind.STATIC_SENTENCE
    hub.save_model(_encoder(), tmp_path / "m")
    with pytest.raises(UserError, match="a BERT encoder, not static sentence vectors"):
        load_static_encoder(tmp_path / "m")


def test_seq2seq_and_recommender(tmp_path, tokenizer):
    seq = Seq2Seq(Seq2SeqConfig(vocab_size=tokenizer.vocab_size, embed_dim=4, hidden=6))
    save_seq2seq(seq, tokenizer, tmp_path / "s2s")
    assert model_kind(tmp_path / "s2s") is ModelKind.SEQ2SEQ
    cats = Categories(users=[1, 2], movies=[1, 2], titles=["x", "y"], counts=[1, 1],
                      genres=["g"], first_year=1990, year_buckets=2)
    rec = Recommender(RecommenderConfig(users=2, movies=2, genres=1, years=2, dim=3, hidden=4),
                      torch.Generator().manual_seed(0))
    save_recommender(rec, cats, tmp_path / "rec")
    assert model_kind(tmp_path / "rec") is ModelKind.RECOMMENDER


def test_unknown_and_missing_directories_are_one_line_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    for path, what in ((tmp_path / "empty", "not a model directory"),
                       (tmp_path / "nowhere", "model directory does not exist")):
        with pytest.raises(UserError, match=what) as e:
            model_kind(path)
        assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_require_kind_says_what_the_directory_holds_instead(tmp_path):
    hub.save_model(_encoder(), tmp_path / "m")
    assert require_kind(tmp_path / "m", ModelKind.ENCODER, ModelKind.ELMO) == tmp_path / "m"
    with pytest.raises(UserError, match=r"m: a BERT encoder, not static word vectors"):
        require_kind(tmp_path / "m", ModelKind.STATIC)
    # each kind's loader refuses the others in that one line
    for load, kind in ((StaticVectors.load, "static word vectors"),
                       (load_elmo, "an ELMo language model"),
                       (load_seq2seq, "a sequence-to-sequence model"),
                       (load_recommender, "an entity-embedding recommender")):
        with pytest.raises(UserError, match=f"a BERT encoder, not {kind}"):
            load(tmp_path / "m")


@pytest.mark.parametrize("kind", [ModelKind.STATIC, ModelKind.SEQ2SEQ, ModelKind.RECOMMENDER,
                                  ModelKind.ELMO])
def test_a_missing_directory_of_a_kind_only_bertkit_writes_says_what_makes_one(tmp_path,
                                                                             kind):
    """`static neighbors --model vecs` with no `vecs` told the user to fetch it with
    `huggingface-cli download vecs`, which no hub model answers."""
    with pytest.raises(UserError) as caught:
        require_kind(tmp_path / "vecs", kind)
    message = str(caught.value)
    assert message == f"{tmp_path / 'vecs'}: no such directory; expected {kind.value}"
    assert "huggingface" not in message
