"""The convolutional sentence classifier (Kim 2014) as a model family of `finetune`: max-pooling
over time is position-invariant, a separable toy task is learned through the shared recipe,
pairs are encoded side by side, and the saved directory predicts and evaluates."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bertkit.cli.main as cli
from bertkit.files import UserError
from bertkit.finetuning.cnn import (SEP, CnnBackbone, CnnOptions, ConvClassifier, ConvEncoder,
                                    WordTokenizer, load_cnn, max_over_time)
from bertkit.finetuning.heads import problem_loss
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.recipe import FinetuneConfig, finetune
from bertkit.finetuning.tasks import TASKS, Tag
from bertkit.embeddings.static import StaticVectors, Tokenization

WORDS = ["good", "great", "fine", "bad", "awful", "poor", "the", "film", "was", "a", "plot",
         "and", "it", "is", "cat", "dog", "sits", "runs", "not"]


def _vectors(tmp_path, dim: int = 8):
    rng = np.random.default_rng(0)
    model = StaticVectors(WORDS, np.ones(len(WORDS)), rng.normal(size=(len(WORDS), dim)),
                          Tokenization())
    return model.save(tmp_path / "vectors")


def test_max_over_time_is_position_invariant():
    tok = WordTokenizer(["x", "y", "z"], Tokenization())
    enc = ConvEncoder(tok.vocab_size, 3, widths=[2], filters=1)
    with torch.no_grad():
        enc.embeddings.weight.zero_()
        enc.embeddings.weight[tok.index["x"]] = torch.tensor([1.0, 0, 0])
        enc.embeddings.weight[tok.index["y"]] = torch.tensor([0, 1.0, 0])
        # one filter that fires on the bigram "x y": x then y
        enc.convs[0].weight.zero_()
        enc.convs[0].weight[0, 0, 0] = 1.0
        enc.convs[0].weight[0, 1, 1] = 1.0
        enc.convs[0].bias.zero_()
    ids = [e.ids for e in tok.encode_batch(["x y z z z z", "z z z z x y", "z x y z",
                                            "y x z z z z"])]
    batch = torch.tensor(ids[:2] + [ids[2] + [0, 0]] + ids[3:])  # the third padded
    mask = batch != 0
    features = enc(batch, mask)[:, 0]
    assert features[:3].tolist() == [2.0, 2.0, 2.0]  # the bigram, wherever it is
    assert features[3].item() == 1.0  # "y x": half the pattern at most
    # padding never wins the max: a filter whose bias is its best value on empty windows
    with torch.no_grad():
        enc.convs[0].bias.fill_(5.0)
        enc.convs[0].weight.neg_()
    short, padded = torch.tensor([ids[2]]), torch.tensor([ids[2] + [0] * 6])
    assert torch.equal(enc(short, short != 0), enc(padded, padded != 0))


def test_max_over_time_skips_invalid_positions():
    maps = torch.tensor([[[1.0, 9.0, 3.0]], [[4.0, 2.0, 8.0]]])
    valid = torch.tensor([[True, False, True], [False, False, False]])
    assert max_over_time(maps, valid).tolist() == [[3.0], [0.0]]


def test_word_tokenizer_pairs_and_truncation():
    tok = WordTokenizer(["a", "b", "c"], Tokenization())
    single, pair = tok.encode_batch(["A b zebra"])[0], \
        tok.encode_batch(["a b c a"], ["c c"], max_length=5)[0]
    assert single.ids == [3, 4, 1] and single.type_ids == [0, 0, 0]  # unknown -> [UNK]
    assert pair.ids == [3, 4, 2, 5, 5] and pair.type_ids == [0, 0, 1, 1, 1]
    assert SEP == 2


def test_pair_sides_are_encoded_apart():
    torch.manual_seed(0)
    model = ConvClassifier(10, 4, 2, widths=[2, 3], filters=3, dropout=0.0, pair=True)
    a, b = [3, 4, 5], [6, 7]
    ids = torch.tensor([a + [SEP] + b])
    types = torch.tensor([[0] * len(a) + [1] * (len(b) + 1)])
    logits = model(ids, types, torch.ones_like(ids))
    u = model.conv(torch.tensor([a]), torch.ones(1, 3, dtype=torch.bool))
    v = model.conv(torch.tensor([b]), torch.ones(1, 2, dtype=torch.bool))
    expected = model.classifier(torch.cat([u, v, (u - v).abs(), u * v], -1))
    assert torch.allclose(logits, expected, atol=1e-6)
    swapped = model(torch.tensor([b + [SEP] + a]),
                    torch.tensor([[0] * len(b) + [1] * (len(a) + 1)]), torch.ones_like(ids))
    assert not torch.allclose(logits, swapped)  # which side is which matters


def _toy(path, n: int, seed: int, pair: bool = False):
    """Sentiment by word: a positive word makes the text positive. For pairs the label is the
    second text's sentiment, while the first holds a sentiment word of its own: only a model
    that keeps the sides apart can tell."""
    rng = np.random.default_rng(seed)
    pos, neg, filler = WORDS[:3], WORDS[3:6], WORDS[6:14]

    def text(positive):
        words = list(rng.choice(filler, size=int(rng.integers(3, 9))))
        words.insert(int(rng.integers(len(words) + 1)), str(rng.choice(pos if positive else neg)))
        return " ".join(words)

    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            x, y = bool(rng.integers(2)), bool(rng.integers(2))
            row = {"text": text(x), "label": "positive" if x else "negative"}
            if pair:
                row = {"premise": text(x), "hypothesis": text(y),
                       "label": "positive" if y else "negative"}
            f.write(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize("embeddings", ["static", "random"])
def test_learns_a_separable_task_through_the_recipe(tmp_path, embeddings, one_thread):
    vectors = _vectors(tmp_path)
    train, dev = _toy(tmp_path / "train.jsonl", 300, 0), _toy(tmp_path / "dev.jsonl", 80, 1)
    backbone = CnnBackbone.load(CnnOptions(vectors=vectors, filters=8, embeddings=embeddings))
    result = finetune("classify", vectors, train, dev, tmp_path / "out",
                      FinetuneConfig(epochs=6, batch_size=16, head_lr=1e-2, seed=0,
                                     show_progress=False), backbone=backbone)
    assert result.dev_metrics["accuracy"] >= 0.95
    assert result.dev_metrics["baseline"]["accuracy"] < 0.7
    runner = TaskModel.load(tmp_path / "out")
    assert runner.evaluate(runner.task.read(dev))["accuracy"] == result.dev_metrics["accuracy"]
    assert runner.classify(["the film was great", "the plot was awful"])[0]["label"] \
        == "positive"
    model, _, task = load_cnn(tmp_path / "out")
    assert task.name == "classify" and not model.pair


def test_frozen_vectors_stay_put(tmp_path, one_thread):
    vectors = _vectors(tmp_path)
    train = _toy(tmp_path / "train.jsonl", 60, 0)
    backbone = CnnBackbone.load(CnnOptions(vectors=vectors, filters=4, embeddings="frozen"))
    finetune("classify", vectors, train, None, tmp_path / "out",
             FinetuneConfig(epochs=1, batch_size=16, show_progress=False), backbone=backbone)
    model, tokenizer, _ = load_cnn(tmp_path / "out")
    table = model.conv.embeddings.weight.detach()[3:].numpy()
    assert np.allclose(table, StaticVectors.load(vectors).vectors, atol=1e-6)
    # the task is looked up among the task types given, for a CNN directory too
    assert TaskModel.load(tmp_path / "out", task_types=TASKS).task.name == "classify"
    with pytest.raises(UserError, match="unknown task 'classify'; choose one of tag"):
        TaskModel.load(tmp_path / "out", task_types=(Tag,))


def test_a_task_the_cnn_cannot_train_is_refused_before_the_data_is_read(tmp_path):
    vectors = _vectors(tmp_path)
    backbone = CnnBackbone.load(CnnOptions(vectors=vectors, filters=4))
    with pytest.raises(UserError, match="--model cnn trains a label or a number per text"):
        finetune(Tag(), vectors, _toy(tmp_path / "t.jsonl", 20, 0), None, tmp_path / "out",
                 FinetuneConfig(show_progress=False), backbone=backbone)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("problem,outputs", [("regression", 1), ("regression", 3),
                                              ("multi_label_classification", 4),
                                              ("single_label_classification", 4)])
def test_the_cnn_and_the_encoder_share_one_problem_loss(problem, outputs):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, outputs, generator=g)
    labels = {"regression": torch.randn(5, outputs, generator=g).squeeze(-1),
              "multi_label_classification": (torch.rand(5, outputs, generator=g) > 0.5).float(),
              "single_label_classification": torch.randint(outputs, (5,), generator=g)}[problem]
    plain = {"regression": lambda: ((logits.squeeze(-1) - labels) ** 2).mean(),
             "multi_label_classification": lambda: torch.nn.functional.
             binary_cross_entropy_with_logits(logits, labels),
             "single_label_classification": lambda: torch.nn.functional.cross_entropy(
                 logits, labels)}[problem]()
    cnn = ConvClassifier(10, 4, outputs, widths=[2], filters=2, dropout=0.0, pair=False,
                         problem_type=problem)
    torch.testing.assert_close(cnn.loss(logits, labels), plain)
    torch.testing.assert_close(problem_loss(logits, labels, problem), plain)


@pytest.mark.slow
def test_pair_task_through_the_cli(tmp_path, capsys, monkeypatch, one_thread):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the command would take every core
    vectors = _vectors(tmp_path)
    train = _toy(tmp_path / "train.jsonl", 300, 0, pair=True)
    dev = _toy(tmp_path / "dev.jsonl", 80, 1, pair=True)
    out = tmp_path / "out"
    assert cli.main(["finetune", "pair", "--model", "cnn", "--vectors", str(vectors),
                     "--train", str(train), "--dev", str(dev), "--out", str(out), "--filters",
                     "8", "--epochs", "10", "--head-lr", "1e-2", "--batch-size", "16",
                     "--cnn-dropout", "0.1", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", "--model", str(out), "--input", str(dev), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["accuracy"] >= 0.9, scores
    assert load_cnn(out)[0].pair


def test_cli_refusals(tmp_path, capsys):
    train = _toy(tmp_path / "train.jsonl", 20, 0)
    assert cli.main(["finetune", "classify", "--model", "cnn", "--train", str(train),
                     "--out", str(tmp_path / "out")]) == 2
    assert "--model cnn needs --vectors" in capsys.readouterr().err
    with pytest.raises(UserError, match="--cnn-dropout"):
        CnnOptions(cnn_dropout=1.0)


def test_regression_too(tmp_path, one_thread):
    vectors = _vectors(tmp_path)
    rows = [json.loads(line) for line in _toy(tmp_path / "t.jsonl", 300, 0).read_text().split("\n")
            if line]
    train = tmp_path / "scores.jsonl"
    train.write_text("".join(json.dumps({"text": r["text"], "score": 2.0 if r["label"] ==
                                         "positive" else -2.0}) + "\n" for r in rows))
    backbone = CnnBackbone.load(CnnOptions(vectors=vectors, filters=8, cnn_dropout=0.1))
    result = finetune("regress", vectors, train, None, tmp_path / "out",
                      FinetuneConfig(epochs=10, batch_size=16, head_lr=1e-2, show_progress=False),
                      backbone=backbone)
    assert load_cnn(tmp_path / "out")[0].problem_type == "regression"
    assert result.dev_metrics["pearson"] > 0.9, result.dev_metrics
