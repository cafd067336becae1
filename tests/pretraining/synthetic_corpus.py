"""A synthetic corpus for the pretraining tests: words made of syllables, sentences with
abbreviations and quotes, documents of paragraphs, and a WordPiece vocabulary that covers them.

A helper module, not a test module (tests/pretraining is on pytest's pythonpath): test modules
import it, never each other.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bertkit.text.tokenizer import Tokenizer

SYLLABLES = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "an", "el", "or"]
WORDS = sorted({a + b for a in SYLLABLES for b in SYLLABLES} | set(SYLLABLES))
SUFFIXES = ["s", "ed", "ing", "ly"]


def make_tokenizer(root: Path) -> Path:
    """A WordPiece vocabulary over the synthetic words, with letters so nothing is [UNK]."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(".,!?;:'\"()-") + letters
              + WORDS[:100] + ["mr"] + ["##" + s for s in SUFFIXES + letters])
    root.mkdir(parents=True, exist_ok=True)
    (root / "vocab.txt").write_text("\n".join(dict.fromkeys(pieces)) + "\n", encoding="utf-8")
    Tokenizer.from_vocab(root / "vocab.txt").save(root / "tok")
    return root / "tok"


def sentence(rng) -> str:
    n = int(rng.integers(3, 14))
    words = [WORDS[i] + (rng.choice(SUFFIXES) if rng.random() < 0.2 else "")
             for i in rng.integers(0, len(WORDS), n)]
    if rng.random() < 0.1:
        words.insert(1, "Mr.")
    if rng.random() < 0.1:
        words[-1] += ","
        words.append("\u201cquoted\u201d")
    return " ".join(words).capitalize().replace("mr.", "Mr.") + str(rng.choice([".", "!", "?"]))


def write_corpus(path: Path, docs=40, seed=0, paragraphs=(1, 4), sentences=(1, 6)) -> list:
    """Blank-line separated documents of paragraph lines; returns the documents' lines."""
    rng = np.random.default_rng(seed)
    documents = [[" ".join(sentence(rng) for _ in range(int(rng.integers(*sentences))))
                  for _ in range(int(rng.integers(*paragraphs)))] for _ in range(docs)]
    path.write_text("\n\n".join("\n".join(d) for d in documents) + "\n", encoding="utf-8")
    return documents
