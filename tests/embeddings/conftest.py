"""A tiny random BERT over a small WordPiece vocabulary, and the sentences the embedding tests
run it on."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.embeddings.embedder import Embedder
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

WORDS = ["the", "a", "we", "sat", "on", "river", "bank", "money", "rates", "raised", "water",
         "un", "##believ", "##able", "##s", "play", "##ing", ".", ","]
SENTENCES = ["we sat on the river bank .", "the bank raised rates", "unbelievable",
             "a bank , a river , the water , the money , the rates .", "playing"]


def _tiny_bert(path: Path, max_positions: int = 64) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    tokenizer = Tokenizer.from_vocab(path / "vocab.txt")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_layers=3, num_heads=4,
                        intermediate_size=64, max_positions=max_positions)
    with torch.random.fork_rng():  # the test process's generator is left as it was
        torch.manual_seed(0)
        encoder = Encoder(cfg)
        init_weights(encoder, cfg)
        with torch.no_grad():  # larger weights than BERT's init, so layers differ visibly
            for p in encoder.parameters():
                p.add_(torch.randn_like(p) * 0.2)
    return hub.save_model(encoder, path / "bert", tokenizer=tokenizer)


@pytest.fixture(scope="session")
def make_tiny_bert():
    """make_tiny_bert(dir, max_positions=64) -> the directory of a random 3-layer BERT
    (hidden size 32, 4 heads) over WORDS, the same weights every time."""
    return _tiny_bert


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """One tiny BERT directory shared by the embedding tests: read it, never write into it
    (a test that adds files makes its own with make_tiny_bert)."""
    return _tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def embedder(tiny_bert_dir) -> Embedder:
    """An Embedder over tiny_bert_dir. Shared: a test that changes it loads its own."""
    return Embedder.load(tiny_bert_dir)


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    """Short texts over the tiny vocabulary, of different lengths, one a single word that is
    three pieces."""
    return list(SENTENCES)


BERT_WORDS = ["the", "we", "sat", "on", "river", "bank", "money", "raised", "rates", "un",
              "##believ", "##able", "."]


@pytest.fixture(scope="session")
def bank_bert(tmp_path_factory) -> Path:
    """A random 2-layer BERT (hidden 16) whose vocabulary holds the textbooks' bank sentences."""
    path = tmp_path_factory.mktemp("bank-bert")
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + BERT_WORDS) + "\n")
    tokenizer = Tokenizer.from_vocab(path / "vocab.txt")
    cfg = EncoderConfig(vocab_size=5 + len(BERT_WORDS), hidden_size=16, num_layers=2,
                        num_heads=2, intermediate_size=32, max_positions=32)
    with torch.random.fork_rng():  # the modules' default init draws globally
        encoder = Encoder(cfg)
    init_weights(encoder, cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():  # larger weights than BERT's init, so the layers differ visibly
        g = torch.Generator().manual_seed(1)
        for p in encoder.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return hub.save_model(encoder, path / "bert", tokenizer=tokenizer)
