"""The prepared tiny corpus that the pretraining and elastic tests train on."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny) -> Path:
    """The tiny corpus with a 120-piece vocabulary, prepared with a 10% held-out split (one
    per test module)."""
    from bertkit.pretraining.corpus import prepare
    from bertkit.text.vocab import train_tokenizer

    root = tmp_path_factory.mktemp("prepared")
    corpus = tiny.write_corpus(root / "corpus.txt")
    train_tokenizer([corpus], vocab_size=120, out=root / "tok", progress=False)
    prepare([corpus], root / "tok", root / "data", heldout_fraction=0.1, workers=1,
            progress=False)
    return root / "data"
