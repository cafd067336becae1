"""A table of static word vectors and its queries: one vector per vocabulary entry (a lowercase
word, or a bertkit tokenizer's piece), whatever the context. The baseline that contextual
vectors are measured against; `bertkit static train` (bertkit.road.word2vec) writes them, and
fine-tuning's CNN starts from them.

Queries: a word's vector (a word of several pieces is the mean of their vectors), cosine
similarity, nearest neighbours, analogies (a - b + c), and the mean vector of a text or of the
words around a target.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from bertkit.embeddings.standardize import unit_rows
from bertkit.files import UserError, atomic_dir, read_json
from bertkit.model.kind import STATIC_VECTORS_FILE, STATIC_VOCAB_FILE, ModelKind, require_kind
from bertkit.text.tokenizer import Tokenizer
from bertkit.training.settings import write_settings

WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
"""A word: letters and digits, with inner apostrophes ("don't", "father's")."""
VECTORS_FILE = STATIC_VECTORS_FILE
VOCAB_FILE = STATIC_VOCAB_FILE
TOKENIZER_DIR = "tokenizer"


# Tokens ------------------------------------------------------------------------------------------

class Tokenization:
    """Splits text into tokens with character offsets: whole lowercase words, or the pieces of
    a bertkit tokenizer (`tokenizer` given)."""

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        self._pieces: list[str] = []
        if tokenizer is not None:
            vocab = tokenizer.get_vocab()
            self._pieces = [""] * (max(vocab.values()) + 1)
            for piece, i in vocab.items():
                self._pieces[i] = piece

    @property
    def kind(self) -> str:
        return "words" if self.tokenizer is None else "pieces"

    def split(self, texts: Sequence[str]) -> list[list[tuple[str, int, int]]]:
        """(token, start, end) for every token of every text."""
        if self.tokenizer is None:
            return [[(m.group().lower(), m.start(), m.end()) for m in WORD.finditer(t)]
                    for t in texts]
        batch = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [list(zip(e.tokens, (o[0] for o in e.offsets), (o[1] for o in e.offsets)))
                for e in batch]

    def tokens(self, texts: Sequence[str]) -> list[list[str]]:
        if self.tokenizer is None:
            return [WORD.findall(t.lower()) for t in texts]
        # The fast path computes ids only (no offsets, no token strings).
        batch = self.tokenizer.encode_batch(list(texts), add_special_tokens=False,
                                            with_offsets=False)
        flat, lengths = batch.flat_ids()
        pieces = [self._pieces[i] for i in flat.tolist()]
        bounds = np.cumsum(np.r_[0, lengths]).tolist()
        return [pieces[a:b] for a, b in zip(bounds[:-1], bounds[1:])]



# The vectors --------------------------------------------------------------------------------

class StaticVectors:
    """One vector per vocabulary entry, with the tokenization they were trained with."""

    def __init__(self, tokens: list[str], counts: np.ndarray, vectors: np.ndarray,
                 tokenization: Tokenization, config: dict | None = None,
                 stats: dict | None = None, context: np.ndarray | None = None):
        self.tokens = list(tokens)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        """[V, D] input vectors, the word vectors."""
        self.context = context
        """[V, D] context (output) vectors, kept so that training can be inspected."""
        self.tokenization = tokenization
        self.config = config
        """The word2vec settings they were trained with (bertkit.road.word2vec.SkipGramConfig
        as a dict), when known."""
        self.stats = stats
        """What training measured (bertkit.road.word2vec.TrainStats as a dict), when known."""
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self._unit = unit_rows(self.vectors)

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    # Looking words up ---------------------------------------------------------------------

    def ids_of(self, word: str) -> list[int]:
        """Vocabulary ids making up `word` (one for a whole word, its pieces otherwise); []
        when it is out of the vocabulary."""
        toks = self.tokenization.tokens([word])[0]
        if self.tokenization.kind == "words" and len(toks) != 1:
            return []
        ids = [self.index.get(t) for t in toks]
        return [] if not ids or None in ids else ids

    def vector(self, word: str) -> np.ndarray:
        """The word's vector [D] (mean of its pieces' vectors); UserError when unknown."""
        ids = self.ids_of(word)
        if not ids:
            raise UserError(f"{word!r} is not in the vocabulary of {len(self.tokens):,} "
                            f"{self.tokenization.kind}")
        return self.vectors[ids].mean(0)

    def similarity(self, a: str, b: str) -> float:
        """Cosine between the vectors of two words."""
        return float(unit_rows(self.vector(a)) @ unit_rows(self.vector(b)))

    def neighbors(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        """The k vocabulary entries of highest cosine with `word`, the word itself left out."""
        v = self.vector(word)
        cos = self._unit @ unit_rows(v)  # [V]
        for i in self.ids_of(word):
            cos[i] = -np.inf
        top = np.argpartition(-cos, min(k, len(cos) - 1))[:k]
        top = top[np.argsort(-cos[top])]
        return [(self.tokens[i], float(cos[i])) for i in top if np.isfinite(cos[i])]

    def analogy(self, a: str, b: str, c: str, k: int = 1) -> list[tuple[str, float]]:
        """a - b + c: the k vocabulary entries of highest cosine with unit(a) - unit(b) +
        unit(c), the three inputs left out (king - man + woman -> queen)."""
        unit = [unit_rows(self.vector(w)) for w in (a, b, c)]
        cos = self._unit @ unit_rows(unit[0] - unit[1] + unit[2])  # [V]
        for word in (a, b, c):
            cos[self.ids_of(word)] = -np.inf
        k = min(k, len(cos) - 1)
        top = np.argpartition(-cos, k)[:k]
        top = top[np.argsort(-cos[top])]
        return [(self.tokens[i], float(cos[i])) for i in top if np.isfinite(cos[i])]

    # Vectors for texts -------------------------------------------------------------------

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """The mean vector of each text's known tokens, [N, D] (zeros when none is known)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, toks in enumerate(self.tokenization.tokens(texts)):
            ids = [self.index[t] for t in toks if t in self.index]
            if ids:
                out[i] = self.vectors[ids].mean(0)
        return out

    def instance_vectors(self, texts: Sequence[str],
                         spans: Sequence[tuple[int, int]]) -> np.ndarray:
        """What a static model gives for a word *instance* text[start:end]: the vector of
        its type, the same in every context. [N, D]; UserError for an unknown word."""
        return np.stack([self.vector(t[a:b]) for t, (a, b) in zip(texts, spans)])

    def context_vectors(self, texts: Sequence[str], spans: Sequence[tuple[int, int]],
                        window: int = 5, include_target: bool = False) -> np.ndarray:
        """What a static model can say about a word in context: the mean vector of the known
        tokens within `window` tokens of the target `text[start:end]` (the target's own
        tokens left out unless `include_target`: they are the same for every sense).
        [N, D], zeros when no context token is known."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, (toks, (start, end)) in enumerate(zip(self.tokenization.split(texts), spans)):
            inside = [j for j, (_, a, b) in enumerate(toks) if a < end and b > start]
            if not inside:
                continue
            lo, hi = max(inside[0] - window, 0), inside[-1] + window + 1
            chosen = [t for j, (t, _, _) in enumerate(toks[lo:hi], lo)
                      if include_target or j not in inside]
            ids = [self.index[t] for t in chosen if t in self.index]
            if ids:
                out[i] = self.vectors[ids].mean(0)
        return out

    # Files -------------------------------------------------------------------------------

    def save(self, path: str | Path, settings: dict | None = None) -> Path:
        """A directory: vectors.safetensors (input and context vectors), vocab.json (tokens,
        counts, tokenization, training config and stats), for pieces the tokenizer, and with
        `settings` (`bertkit.training.settings.run_settings`) training_args.json."""
        tensors = {"vectors": torch.from_numpy(np.ascontiguousarray(self.vectors))}
        if self.context is not None:
            tensors["context"] = torch.from_numpy(np.ascontiguousarray(self.context))
        meta = {"format": "bertkit-static", "tokenization": self.tokenization.kind,
                "tokens": self.tokens, "counts": self.counts.tolist(),
                "config": self.config, "stats": self.stats}
        with atomic_dir(path) as tmp:
            save_file(tensors, str(tmp / VECTORS_FILE))
            (tmp / VOCAB_FILE).write_text(json.dumps(meta, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
            if self.tokenization.tokenizer is not None:
                self.tokenization.tokenizer.save(tmp / TOKENIZER_DIR)
            if settings is not None:
                write_settings(tmp, settings)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "StaticVectors":
        p = require_kind(path, ModelKind.STATIC)
        meta = read_json(p / VOCAB_FILE, "bertkit static vocabulary", format="bertkit-static")
        try:
            with safe_open(str(p / VECTORS_FILE), "np") as f:
                vectors = f.get_tensor("vectors")
                context = f.get_tensor("context") if "context" in f.keys() else None
        except Exception as e:  # safetensors raises its own error types
            raise UserError(f"{p / VECTORS_FILE}: unreadable vectors ({e})") from None
        if vectors.shape[0] != len(meta["tokens"]):
            raise UserError(f"{p}: {vectors.shape[0]} vectors for {len(meta['tokens'])} tokens")
        tokenizer = None
        if meta["tokenization"] == "pieces":
            tokenizer = Tokenizer.load(p / TOKENIZER_DIR)
        return cls(meta["tokens"], np.asarray(meta["counts"]), vectors,
                   Tokenization(tokenizer), meta.get("config"), meta.get("stats"), context)


__all__ = ["Tokenization", "StaticVectors", "WORD", "VECTORS_FILE", "VOCAB_FILE", "TOKENIZER_DIR"]
