"""Fixtures of the retrieval tests: synthetic queries and passages over a small vocabulary, a
tiny random sentence model over it, and a stand-in embedder whose vectors are fixed random
numbers per text (mining and search checked against plain loops without a model's cost)."""
from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.embeddings.embedder import Embedder
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

WORDS = ["river", "bank", "money", "water", "rates", "boat", "fish", "loan", "tree", "rain",
         "stone", "bread", "king", "ship", "road", "field", "horse", "cloud", "song", "wall"]


def sentences(n: int, seed: int, length: int = 6) -> list[str]:
    """n distinct texts of `length` words drawn from WORDS."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choices(WORDS, k=length))] = None
    return list(out)


class HashEmbedder:
    """sentence-transformers' `encode` with a fixed random vector per text (from its hash):
    continuous scores, so no two candidates tie."""

    def __init__(self, dim: int = 12):
        self.dim = dim
        self.calls = 0

    def vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)

    def encode(self, texts, batch_size: int = 32, show_progress_bar: bool = False):
        self.calls += 1
        return np.stack([self.vector(t) for t in texts])


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture(scope="session")
def tiny_sentence_model(tmp_path_factory) -> Path:
    """A random 2-layer BERT over WORDS saved as a sentence-transformers directory (mean
    pooling, unit vectors)."""
    path = tmp_path_factory.mktemp("tiny-sentence")
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_layers=2, num_heads=2,
                        intermediate_size=64, max_positions=64)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        encoder = Encoder(cfg)
        init_weights(encoder, cfg)
    embedder = Embedder(encoder, Tokenizer.from_vocab(path / "vocab.txt"), normalize=True)
    return embedder.save(path / "model")


def _tiny_vocab(path: Path) -> Tokenizer:
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    return Tokenizer.from_vocab(path / "vocab.txt")


TINY = dict(vocab_size=5 + len(WORDS), hidden_size=32, num_layers=2, num_heads=2,
            intermediate_size=64, max_positions=64)


@pytest.fixture(scope="session")
def tiny_sparse_model(tmp_path_factory) -> Path:
    """A random 2-layer BERT over WORDS with a head tied to its word embeddings, saved as a
    SPLADE (SparseEncoder) directory, as `finetune sparse` writes one."""
    from bertkit.embeddings.sparse import new_model, save_sparse_model

    path = tmp_path_factory.mktemp("tiny-sparse")
    tokenizer = _tiny_vocab(path)
    cfg = EncoderConfig(**TINY)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        encoder = Encoder(cfg)
        init_weights(encoder, cfg)
        model = new_model(encoder)
    return save_sparse_model(model, path / "model", tokenizer, 64)


@pytest.fixture(scope="session")
def tiny_reranker(tmp_path_factory) -> Path:
    """A random 2-layer BERT over WORDS fine-tuned as a reranker for two steps (`finetune
    rerank`'s directory: what matters here is its kind and its scores, not its quality)."""
    import json

    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Rerank
    from bertkit.model import hub

    path = tmp_path_factory.mktemp("tiny-rerank")
    tokenizer = _tiny_vocab(path)
    cfg = EncoderConfig(**TINY)
    with torch.random.fork_rng():
        torch.manual_seed(2)
        encoder = Encoder(cfg)
        init_weights(encoder, cfg)
    base = hub.save_model(encoder, path / "bert", tokenizer=tokenizer)
    texts = sentences(64, 5, length=4)
    rows = [{"anchor": a, "positive": " ".join(reversed(a.split())), "negative": n}
            for a, n in zip(texts[:32], texts[32:])]
    train = path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    finetune(Rerank(), base, train, None, path / "rerank",
             FinetuneConfig(epochs=1, batch_size=16, lr=1e-3, warmup=0.0, patience=None,
                            show_progress=False, precision="fp32"))
    return path / "rerank"
