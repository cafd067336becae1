"""Fixtures of the fine-tuning tests: a tiny random BERT whose vocabulary is the synthetic
words, synthetic task data (sentiment, NER, SQuAD) and a quick FinetuneConfig.

Fixture names mean one thing here: `tiny_bert` is the model directory, `task_files` the
synthetic data files, `synthetic` the makers of synthetic data, `quick_config` a config maker.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.finetuning.recipe import FinetuneConfig
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

POSITIVE, NEGATIVE = ["good", "great", "fine"], ["bad", "awful", "poor"]
FILLER = ["the", "movie", "film", "was", "is", "plot", "really", "and", "a", "so"]
PEOPLE, CITIES = ["john", "mary", "alice"], ["paris", "london", "rome"]
WORDS = POSITIVE + NEGATIVE + FILLER + PEOPLE + CITIES + [
    "went", "to", "new", "york", "where", "did", "go", "who", "what", "colour", "sky", "blue",
    ".", ",", "?", "##s", "##ing"]
FAST = dict(lr=1e-2, head_lr=1e-2, warmup=0.0, show_progress=False, patience=None)


def _tiny_bert(path: Path, architecture: str = "bert", dropout: float = 0.0) -> Path:
    """A random 2-layer BERT (or "modern" encoder) with a vocabulary of the synthetic words,
    saved as a directory."""
    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = Tokenizer.from_vocab(path / "vocab.txt")
    cfg = EncoderConfig(architecture=architecture, vocab_size=len(vocab), hidden_size=32,
                        num_layers=2, num_heads=2,
                        intermediate_size=64, max_positions=64, hidden_dropout=dropout,
                        attention_dropout=dropout)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        encoder = Encoder(cfg)
        init_weights(encoder, cfg)
    hub.save_model(encoder, path / architecture, tokenizer=tokenizer)
    return path / architecture


def sentiment(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        positive = rng.random() < 0.6
        words = rng.sample(FILLER, 4) + [rng.choice(POSITIVE if positive else NEGATIVE)]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": "positive" if positive else "negative",
                     "score": 2.0 if positive else -2.0})
    return rows


def ner(n: int, seed: int) -> list[list[tuple[str, str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        city = [("new", "B-LOC"), ("york", "I-LOC")] if rng.random() < 0.3 else \
            [(rng.choice(CITIES), "B-LOC")]
        # a city name can be a person too, so tagging needs context, not a word list
        person = rng.choice(PEOPLE + CITIES)
        out.append([(person, "B-PER"), ("went", "O"), ("to", "O"), *city, (".", "O")])
    return out


def squad(n: int, seed: int) -> dict:
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(n):
        person, city = rng.choice(PEOPLE), rng.choice(CITIES)
        context = f"{person} went to {city} . the sky is blue ."
        qas = [{"id": f"q{len(paragraphs)}a", "question": f"where did {person} go ?",
                "answers": [{"text": city, "answer_start": context.index(city)}],
                "is_impossible": False},
               {"id": f"q{len(paragraphs)}b", "question": "what colour is the movie ?",
                "answers": [], "is_impossible": True}]
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]}


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_conll(path: Path, sentences) -> Path:
    path.write_text("\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n")
    return path


def write_squad(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="session")
def synthetic() -> SimpleNamespace:
    """Makers of synthetic data (sentiment rows, NER sentences, SQuAD documents) and writers."""
    return SimpleNamespace(sentiment=sentiment, ner=ner, squad=squad, write_jsonl=write_jsonl,
                           write_conll=write_conll, write_squad=write_squad)


@pytest.fixture(scope="session")
def quick_config():
    """FinetuneConfig(**kwargs) with a high learning rate, no warm-up, no early stopping and
    no progress line: the tiny runs learn in a few epochs."""
    return lambda **kwargs: FinetuneConfig(**{**FAST, **kwargs})


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """Directory of a random 2-layer BERT whose vocabulary holds the synthetic words."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_bert_dropout(tmp_path_factory) -> Path:
    """The same BERT with dropout 0.1: a run draws from the random generator at every step, as
    a resumed run must draw alike."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny"), dropout=0.1)


@pytest.fixture(scope="session")
def tiny_modern(tmp_path_factory) -> Path:
    """The same, as the "modern" architecture (a ModernBertModel directory)."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny"), "modern")


@pytest.fixture(scope="session")
def task_files(tmp_path_factory) -> dict[str, Path]:
    """Synthetic data files: sentiment train/dev (JSONL), pairs, NER train/dev (CoNLL), SQuAD
    2.0; "dir" is their folder."""
    d = tmp_path_factory.mktemp("data")
    pairs = [{"premise": r["text"], "hypothesis": s["text"],
              "label": "same" if r["label"] == s["label"] else "different"}
             for r, s in zip(sentiment(160, 5), sentiment(160, 6))]
    return {"train": write_jsonl(d / "train.jsonl", sentiment(160, 1)),
            "dev": write_jsonl(d / "dev.jsonl", sentiment(50, 2)),
            "pairs": write_jsonl(d / "pairs.jsonl", pairs),
            "ner_train": write_conll(d / "train.conll", ner(120, 3)),
            "ner_dev": write_conll(d / "dev.conll", ner(40, 4)),
            "squad": write_squad(d / "squad.json", squad(40, 7)), "dir": d}
