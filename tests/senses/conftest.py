"""A tiny random BERT over a small WordPiece vocabulary, for the word-in-context tests."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

BERT_WORDS = ["the", "we", "sat", "on", "river", "bank", "money", "raised", "rates", "un",
              "##believ", "##able", "."]


@pytest.fixture(scope="session")
def bank_bert(tmp_path_factory) -> Path:
    """A random 2-layer BERT (hidden 16) whose vocabulary holds the seeds' bank sentences."""
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
