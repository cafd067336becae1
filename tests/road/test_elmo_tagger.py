"""ELMo's use for tagging: frozen layers, a learned scalar mix, a linear layer. Context tells
two uses of one word apart where the context-free layer 0 cannot."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bertkit.cli.main as cli
from bertkit.embeddings.embedder import Embedder
from bertkit.finetuning.readers import TaggedSentence
from bertkit.road.elmo import ElmoConfig, ElmoLM, save_elmo
from bertkit.road.elmo_tagger import ElmoTagOptions, MixTagger, tag_words, word_layers
from bertkit.text.vocab import train_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tagger")
    g = np.random.default_rng(0)
    rows = []
    for _ in range(150):
        # "run" is a VERB after "to", a NOUN after "a": only its context says which
        det = g.random() < 0.5
        words = ["i", "like", "a" if det else "to", "run", g.choice(["today", "often", "now"])]
        tags = ["PRON", "VERB", "DET" if det else "PART", "NOUN" if det else "VERB", "ADV"]
        rows.append("".join(f"{w}\t{t}\n" for w, t in zip(words, tags)))
    (tmp / "train.conll").write_text("\n".join(rows))
    (tmp / "text.txt").write_text("i like a run today\ni like to run now\n" * 20)
    tokenizer = train_tokenizer([tmp / "text.txt"], 40, progress=False)
    cfg = ElmoConfig(vocab_size=tokenizer.vocab_size, embed_dim=8, lstm_dim=12, dropout=0.0)
    model = ElmoLM(cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():  # larger random weights: states that differ clearly with context
        for name, p in model.named_parameters():
            if not name.startswith("embed."):
                p.mul_(4.0)
    save_elmo(model, tokenizer, tmp / "elmo")
    return tmp


def test_word_layers_are_the_first_pieces_layers(world):
    embedder = Embedder.load(world / "elmo")
    sentence = TaggedSentence(["i", "like", "to", "run"], ["PRON", "VERB", "PART", "VERB"],
                              "i like to run")
    layers = word_layers(embedder, [sentence], progress=False)
    assert layers.shape == (4, 3, 16)
    vectors = embedder.token_vectors(["i like to run"], layers=2)[0]  # [CLS] i like to run [SEP]
    np.testing.assert_allclose(layers[3, 2], vectors[4], rtol=1e-5, atol=1e-6)


def test_one_layer_or_the_mix():
    x = torch.randn(5, 3, 4)
    only = MixTagger(3, 4, 2, layer=1).eval()
    torch.testing.assert_close(only(x), only.classifier(x[:, 1]))
    assert only.mix is None
    mixed = MixTagger(3, 4, 2).eval()
    torch.testing.assert_close(mixed(x), mixed.classifier(x.mean(1)))  # a fresh mix: the mean


@pytest.mark.slow
def test_context_separates_what_layer_zero_cannot(world, capsys):
    common = dict(model=world / "elmo", train=world / "train.conll", epochs=30, batch_size=64,
                  lr=5e-2, dropout=0.0, quiet=True)
    mix = tag_words(ElmoTagOptions(out=world / "mix", **common))
    static = tag_words(ElmoTagOptions(out=world / "l0", layers="0", **common))
    # layer 0 gives "run" one vector: it can be right only on the majority use
    assert static["dev_accuracy"] < 0.95
    assert mix["dev_accuracy"] == 1.0
    assert sum(mix["layer_weights"]) == pytest.approx(1.0)
    saved = json.loads((world / "mix" / "tagger.json").read_text())
    assert saved["tags"] == ["ADV", "DET", "NOUN", "PART", "PRON", "VERB"]
    assert json.loads((world / "mix" / "metrics.json").read_text())["dev_accuracy"] == 1.0
    # the command
    assert cli.main(["road", "elmo-tag", "--model", str(world / "elmo"), "--train",
                     str(world / "train.conll"), "--out", str(world / "cli"), "--layers", "9",
                     "--quiet"]) == 2
    assert "--layers 9: the model has layers 0..2" in capsys.readouterr().err
    # a run records its settings and the line that runs them again, as pretrain and finetune do
    assert cli.main(["road", "elmo-tag", "--model", str(world / "elmo"), "--train",
                     str(world / "train.conll"), "--out", str(world / "cli"), "--epochs", "2",
                     "--quiet"]) == 0
    record = json.loads((world / "cli" / "training_args.json").read_text())
    assert record["command"].startswith("bertkit road elmo-tag --model ")
    assert "--epochs 2" in record["command"] and record["options"]["epochs"] == 2
    assert record["environment"]["device"] == "cpu"


def test_static_word_layers_are_the_word_vectors():
    from bertkit.road.elmo_tagger import static_word_layers
    from bertkit.embeddings.static import StaticVectors, Tokenization

    vectors = StaticVectors(["like", "run"], np.array([5, 5]),
                            np.array([[1.0, 2.0], [3.0, 4.0]]), Tokenization())
    layers = static_word_layers(vectors, [TaggedSentence(["I", "like", "Run", ","],
                                                         ["PRON", "VERB", "NOUN", "PUNCT"],
                                                         "I like Run ,")])
    assert layers.shape == (4, 1, 2)
    np.testing.assert_array_equal(layers[:, 0], [[0, 0], [1, 2], [3, 4], [0, 0]])  # lowercased


@pytest.mark.slow
def test_entities_are_judged_by_f1_and_static_vectors_tag(world, tmp_path):
    from bertkit.embeddings.static import StaticVectors, Tokenization

    g = np.random.default_rng(1)
    rows = []
    for _ in range(120):  # "a run" is an entity (B-X I-X), "to run" is not
        det = g.random() < 0.5
        words = ["i", "like", "a" if det else "to", "run", "now"]
        tags = ["O", "O", "B-X" if det else "O", "I-X" if det else "O", "O"]
        rows.append("".join(f"{w}\t{t}\n" for w, t in zip(words, tags)))
    (tmp_path / "ner.conll").write_text("\n".join(rows))
    common = dict(train=tmp_path / "ner.conll", epochs=30, batch_size=64, lr=5e-2, dropout=0.0,
                  quiet=True)
    mix = tag_words(ElmoTagOptions(model=world / "elmo", out=tmp_path / "mix", **common))
    assert mix["dev_f1"] == 1.0 and mix["baseline"]["f1"] < 1.0  # baseline: "run" one tag
    assert {"dev_precision", "dev_recall", "dev_accuracy"} <= set(mix)
    assert (tmp_path / "mix" / "layer_weights.png").stat().st_size > 0
    # a static directory: one vector per word, so "run" gets one tag whatever precedes it
    vocab = ["i", "like", "a", "to", "run", "now"]
    StaticVectors(vocab, np.full(6, 10), np.eye(6), Tokenization()).save(tmp_path / "static")
    static = tag_words(ElmoTagOptions(model=tmp_path / "static", out=tmp_path / "st", **common))
    assert static["dev_f1"] < 1.0 and static["dev_accuracy"] < 1.0
    assert "layer_weights" in static and not (tmp_path / "st" / "layer_weights.png").exists()
