"""Word-sense disambiguation: nearest-sense choice on constructed vectors, the
most-frequent-sense fallback, standardization, gloss and prior tuning, files, bad input,
the split, and the CLI end to end on a tiny random BERT and on static vectors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit.cli.main as cli
from bertkit.model import hub
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import Encoder, init_weights
from bertkit.senses.data import (SenseExample, load_source, read_examples, split_examples,
                                 write_examples)
from bertkit.text.tokenizer import Tokenizer
from bertkit.senses.wsd import SenseInventory, WsdOptions, evaluate, predict, train_wsd


class TableSource:
    """Vectors looked up by text: what a model would give, chosen by the test."""

    kind = "contextual"

    def __init__(self, targets: dict[str, list[float]], sentences: dict[str, list[float]]
                 | None = None):
        self.t, self.s = targets, sentences or {}

    def targets(self, examples):
        return np.array([self.t[e.text] for e in examples], dtype=np.float32)

    def sentences(self, texts):
        return np.array([self.s[t] for t in texts], dtype=np.float32)


def ex(text: str, synset: str | None, lemma: str = "bank", pos: str = "noun",
       rank: int | None = None, gloss: str | None = None) -> SenseExample:
    start = text.index(lemma)
    return SenseExample(lemma, text, start, start + len(lemma), pos, synset, rank, gloss)


def test_nearest_sense_embedding_wins():
    train = [ex("bank a1", "money", rank=2), ex("bank a2", "money", rank=2),
             ex("bank b1", "river", rank=1)]
    source = TableSource({"bank a1": [1, 0.2, 0], "bank a2": [1, -0.2, 0],
                          "bank b1": [0, 0, 1], "bank t1": [0.9, 0.5, 0.1],
                          "bank t2": [0.1, 0.1, 2.0]})
    inv = train_wsd(train, source, WsdOptions(method="1nn"), progress=False)
    assert np.allclose(inv.centroids[0], [1, 0, 0])  # mean of the two, unit length
    assert [s.count for s in inv.senses] == [2, 1]
    got = predict(inv, [ex("bank t1", None), ex("bank t2", None)], source)
    assert [p.synset for p in got] == ["money", "river"]
    assert got[0].candidates == 2 and got[0].fallback is None
    assert got[0].score == pytest.approx(0.9 / np.linalg.norm([0.9, 0.5, 0.1]), rel=1e-5)
    # The baseline ignores the vectors: rank 1 wins.
    assert [p.synset for p in predict(inv, [ex("bank t1", None)], source, "mfs")] == ["river"]


def test_fallbacks_for_unseen_lemmas():
    train = [ex("bank a1", "money", rank=2), ex("bank b1", "river", rank=1),
             ex("bank b2", "river", rank=1)]
    source = TableSource({"bank a1": [1, 0], "bank b1": [0, 1], "bank b2": [0, 1],
                          "bank v": [1, 0], "cat x": [1, 0]})
    inv = train_wsd(train, source, WsdOptions(method="1nn"), progress=False)
    verb = ex("bank v", None, pos="verb")  # lemma known only as a noun
    unknown = ex("cat x", None, lemma="cat")
    got = predict(inv, [verb, unknown], source)
    assert got[0].synset == "river" and got[0].fallback == "most frequent sense"
    assert got[1].synset is None and got[1].fallback == "unknown lemma"
    # Without ranks the most frequent sense is the one with most training instances.
    no_rank = [ex("bank a1", "money"), ex("bank b1", "river"), ex("bank b2", "river")]
    inv = train_wsd(no_rank, source, WsdOptions(method="1nn"), progress=False)
    assert predict(inv, [verb], source)[0].synset == "river"
    # --ignore-pos: the verb instance is scored against the noun senses.
    inv = train_wsd(train, source, WsdOptions(method="1nn", use_pos=False), progress=False)
    got = predict(inv, [verb], source)[0]
    assert got.synset == "money" and got.fallback is None
    report = evaluate(inv, [ex("bank v", "money", pos="verb"), ex("cat x", "c", lemma="cat")],
                      source)
    assert (report.correct, report.mfs_correct, report.unknown_lemmas) == (1, 0, 1)


def test_standardization_removes_a_rogue_dimension():
    """Dimension 0 is huge and varies at random: raw cosines follow it, z-scores do not."""
    train = [ex("bank a1", "money"), ex("bank a2", "money"), ex("bank b1", "river"),
             ex("bank b2", "river")]
    table = {"bank a1": [120, 1, 0], "bank a2": [80, 1, 0], "bank b1": [-120, 0, 1],
             "bank b2": [-80, 0, 1], "bank t": [-90, 1, 0]}
    source = TableSource(table)
    test = [ex("bank t", "money")]
    raw = train_wsd(train, source, WsdOptions(method="1nn"), progress=False)
    assert predict(raw, test, source)[0].synset == "river"
    std = train_wsd(train, source, WsdOptions(method="1nn", standardize=True), progress=False)
    assert predict(std, test, source)[0].synset == "money"
    z = std.standardizer.transform(np.array([table[e.text] for e in train], np.float32))
    assert np.allclose(z.mean(0), 0, atol=1e-6) and np.allclose(z.std(0), 1, atol=1e-5)


def _gloss_world(n_lemmas: int = 12, seed: int = 0):
    """Instance vectors that say nothing, sentence vectors that match the gloss of the
    right sense: only the gloss term can get these right."""
    rng = np.random.default_rng(seed)
    targets, sentences, train, test = {}, {}, [], []
    for k in range(n_lemmas):
        lemma = f"w{k}"
        for sense in range(2):
            gloss = f"gloss {k} {sense}"
            direction = rng.normal(size=8)
            sentences[f"{lemma}: {gloss}"] = direction
            for i in range(4):
                text = f"{lemma} s{sense} i{i}"
                targets[text] = rng.normal(size=8)
                sentences[text] = direction + 0.3 * rng.normal(size=8)
                item = ex(text, f"{lemma}.{sense}", lemma=lemma, rank=sense + 1, gloss=gloss)
                (test if i == 3 else train).append(item)
    return TableSource(targets, sentences), train, test


def test_gloss_prior_tunes_its_weights_on_training_data_only():
    source, train, test = _gloss_world()
    inv = train_wsd(train, source, WsdOptions(), progress=False)
    assert inv.options.gloss_weight > 0
    assert inv.tuning["loo_accuracy"] > inv.tuning["loo_accuracy_1nn"]
    assert inv.tuning["instances"] == len(train)
    assert evaluate(inv, test, source).accuracy >= 0.9
    assert evaluate(inv, test, source, method="1nn").accuracy < 0.75
    # Fixed weights are used as given.
    fixed = train_wsd(train, source, WsdOptions(gloss_weight=0.0, prior_weight=0.0),
                      progress=False)
    assert (fixed.options.gloss_weight, fixed.options.prior_weight) == (0.0, 0.0)


def test_save_and_load(tmp_path):
    source, train, test = _gloss_world()
    inv = train_wsd(train, source, WsdOptions(standardize=True), model_name="m",
                    progress=False)
    inv.save(tmp_path / "wsd")
    index = json.loads((tmp_path / "wsd" / "index.json").read_text())
    assert index["lemmas"]["w0"]["noun"][0] == {"synset": "w0.0", "count": 3, "rank": 1,
                                                "gloss": "gloss 0 0", "row": 0}
    assert index["model"] == "m" and index["method"] == "gloss-prior"
    back = SenseInventory.load(tmp_path / "wsd")
    assert predict(back, test, source) == predict(inv, test, source)
    # Re-saved into the same directory without standardizing: the old standardizer file
    # must not come back to life.
    plain = train_wsd(train, source, WsdOptions(), progress=False)
    plain.save(tmp_path / "wsd")
    assert SenseInventory.load(tmp_path / "wsd").standardizer is None
    with pytest.raises(UserError, match="not a WSD directory"):
        SenseInventory.load(tmp_path)


@pytest.mark.parametrize("line, message", [
    ({"lemma": "bank", "text": "the bank", "start": 4}, "missing field 'end'"),
    ({"lemma": "bank", "text": "the bank", "start": 4, "end": 9}, "outside the text"),
    ({"lemma": "bank", "text": "the bank", "start": 0, "end": 3}, "does not match the lemma"),
    ({"lemma": "bank", "text": "the banks", "start": 4, "end": 8}, "cuts a word"),
    ({"lemma": "bank", "text": "the bank", "start": "4", "end": 8}, "must be an integer"),
    ({"lemma": "bank", "text": "the bank", "start": 4, "end": 8, "sense_rank": 0},
     "sense_rank must be 1 or more"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    good = {"lemma": "go", "text": "we went home", "start": 3, "end": 7, "synset": "s"}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps({"synset": "s", **line}) + "\n")
    with pytest.raises(UserError, match=f"^{path}:3: .*{message}"):
        read_examples(path)


def test_unlabelled_lines_are_fine_for_prediction_only(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"lemma": "bank", "text": "a bank", "start": 2, "end": 6}) + "\n")
    assert read_examples(path, labelled=False)[0].target == "bank"
    with pytest.raises(UserError, match=":1: missing field 'synset'"):
        read_examples(path)
    path.write_bytes(b'{"lemma": "b\xff"}\n')
    with pytest.raises(UserError, match=":1: not UTF-8"):
        read_examples(path)


def test_split_is_reproducible_and_keeps_test_senses_in_training():
    examples = [ex(f"bank {s} {i}", f"s{s}") for s in range(30) for i in range(1 + s % 4)]
    train, test = split_examples(examples, 0.5, seed=3)
    again = split_examples(examples, 0.5, seed=3)
    assert (train, test) == again
    assert split_examples(examples, 0.5, seed=4) != again
    assert len(train) + len(test) == len(examples)
    assert {e.synset for e in test} <= {e.synset for e in train}
    once = {f"s{s}" for s in range(30) if s % 4 == 0}
    assert not once & {e.synset for e in test}
    held = len(test) / sum(s % 4 for s in range(30))  # of the instances that may be held out
    assert 0.3 < held < 0.7


# End to end --------------------------------------------------------------------------------------

WORDS = ["the", "a", "we", "sat", "on", "river", "bank", "money", "rates", "raised", "water",
         "fish", "loan", "steep", "muddy", "cash", "deposit", "my", "at", "in", ":", "of"]


def _tiny_bert(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    tokenizer = Tokenizer.from_vocab(path / "vocab.txt")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_layers=4, num_heads=4,
                        intermediate_size=64, max_positions=64)
    torch.manual_seed(0)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg)
    return hub.save_model(encoder, path / "bert", tokenizer=tokenizer)


def _bank_data(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    senses = {"bank.river": (["river", "water", "fish", "steep", "muddy"], 1,
                             "sloping land beside a body of water"),
              "bank.money": (["money", "rates", "loan", "cash", "deposit"], 2,
                             "a financial institution")}
    rows = []
    for i in range(n):
        synset = "bank.river" if i % 2 else "bank.money"
        words, rank, gloss = senses[synset]
        a, b = rng.choice(words, 2, replace=False)
        text = f"the {a} bank {b}"
        start = text.index(" bank ") + 1
        rows.append({"lemma": "bank", "pos": "noun", "synset": synset, "sense_rank": rank,
                     "gloss": gloss, "text": text, "start": start, "end": start + 4})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wsd")
    return (tmp, _tiny_bert(tmp / "model"), _bank_data(tmp / "train.jsonl", 24, 0),
            _bank_data(tmp / "test.jsonl", 10, 1))


def test_cli_end_to_end_on_a_tiny_bert(world, capsys):
    tmp, model, train, test = world
    assert cli.main(["wsd", "train", "--model", str(model), "--input", str(train),
                     "--out", str(tmp / "senses"), "--quiet"]) == 0
    assert "2 senses of 1 lemmas from 24 examples" in capsys.readouterr().out
    assert cli.main(["wsd", "evaluate", "--wsd", str(tmp / "senses"), "--input", str(test),
                     "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["instances"] == 10 and report["average_candidates"] == 2.0
    assert report["mfs_accuracy"] == 0.5  # river (rank 1) is right half the time
    assert report["method"] == "gloss-prior"
    # The command reports what the library measures.
    library = evaluate(SenseInventory.load(tmp / "senses"), read_examples(test),
                       load_source(model, progress=False))
    assert (report["correct"], report["accuracy"]) == (library.correct, library.accuracy)
    out = tmp / "pred.jsonl"
    assert cli.main(["wsd", "predict", "--wsd", str(tmp / "senses"), "--input", str(test),
                     "--out", str(out), "--method", "1nn", "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 10
    assert rows[0]["predicted"] in ("bank.river", "bank.money")
    assert rows[0]["candidates"] == 2 and rows[0]["synset"] == "bank.money"
    assert rows[0]["predicted_gloss"] in ("sloping land beside a body of water",
                                          "a financial institution")
    # Bad input: one line naming file and line, exit 2.
    bad = tmp / "bad.jsonl"
    bad.write_text('{"lemma": "bank", "text": "a bank", "start": 2, "end": 7}\n')
    assert cli.main(["wsd", "evaluate", "--wsd", str(tmp / "senses"), "--input", str(bad),
                     "--quiet"]) == 2
    assert f"{bad}:1: span start=2 end=7 is outside the text" in capsys.readouterr().err


def test_cli_split_and_static_vectors(world, capsys):
    tmp, _, train, test = world
    assert cli.main(["wsd", "split", "--input", str(train), "--fraction", "0.5",
                     "--train-out", str(tmp / "a.jsonl"), "--test-out", str(tmp / "b.jsonl")]) == 0
    a, b = read_examples(tmp / "a.jsonl"), read_examples(tmp / "b.jsonl")
    assert len(a) + len(b) == 24 and {e.synset for e in b} <= {e.synset for e in a}
    assert a[0].gloss and a[0].sense_rank in (1, 2)  # every field survives the split
    # The static baseline through the same commands.
    corpus = tmp / "corpus.txt"
    corpus.write_text("".join(json.loads(line)["text"] + "\n"
                              for line in train.read_text().splitlines()) * 10)
    assert cli.main(["static", "train", "--input", str(corpus), "--dim", "8", "--epochs", "1",
                     "--min-count", "1", "--subsample", "0", "--out", str(tmp / "sv"),
                     "--quiet"]) == 0
    assert cli.main(["wsd", "train", "--model", str(tmp / "sv"), "--input", str(train),
                     "--out", str(tmp / "static-senses"), "--method", "1nn", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["wsd", "evaluate", "--wsd", str(tmp / "static-senses"), "--input",
                     str(test), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "1nn" and report["instances"] == 10
    # Context words decide here ("river" vs "money" around the target): static vectors
    # trained on this corpus separate the two senses.
    assert report["accuracy"] >= 0.7


@pytest.mark.slow
def test_cli_in_a_subprocess(world, tmp_path):
    """One real process: the installed console script trains and evaluates."""
    _, model, train, test = world
    exe = Path(sys.executable).parent / "bertkit"
    for command in (["wsd", "train", "--model", str(model), "--input", str(train), "--out",
                     str(tmp_path / "senses"), "--method", "1nn", "--quiet"],
                    ["wsd", "evaluate", "--wsd", str(tmp_path / "senses"), "--input", str(test),
                     "--json", "--quiet"]):
        done = subprocess.run([str(exe), *command], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["method"] == "1nn" and report["instances"] == 10
    assert report["mfs_accuracy"] == 0.5


def test_write_examples_round_trip(tmp_path):
    items = [ex("bank a1", "money", rank=2, gloss="g"), ex("bank b1", "river")]
    write_examples(items, tmp_path / "x.jsonl")
    back = read_examples(tmp_path / "x.jsonl")
    assert [(e.text, e.synset, e.sense_rank, e.gloss) for e in back] == \
        [(e.text, e.synset, e.sense_rank, e.gloss) for e in items]


# Real data (skipped in a clone without ../shared or the MiniLM package) --------------------------

def test_every_line_of_the_shared_data_passes_the_checks(shared_data):
    for name in ("wordnet_examples.train.jsonl", "wordnet_examples.all_unambiguous.jsonl"):
        examples = read_examples(shared_data / "wsd" / name)
        assert len(examples) > 19000 and all(e.synset and e.gloss for e in examples)


def test_minilm_tells_a_river_bank_from_a_bank_building(shared_data, minilm_dir):
    lines = (shared_data / "wsd" / "wordnet_examples.train.jsonl").read_text().splitlines()
    bank = [json.loads(line) for line in lines if '"lemma": "bank", "pos": "noun"' in line]
    train = [SenseExample(o["lemma"], o["text"], o["start"], o["end"], o["pos"], o["synset"],
                          o["sense_rank"], o["gloss"]) for o in bank]
    source = load_source(minilm_dir, progress=False)
    inv = train_wsd(train, source, WsdOptions(method="1nn"), progress=False)
    river = "we pulled the canoe up on the bank of the river"
    money = "she opened an account at the bank on Monday"
    got = predict(inv, [ex(river, None), ex(money, None)], source)
    glosses = {s.synset: s.gloss for s in inv.senses}
    assert "slope beside a body of water" in glosses[got[0].synset]
    assert "business of banking" in glosses[got[1].synset]
