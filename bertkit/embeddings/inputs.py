"""Texts as the embedder sees them: one input (`Text`: a text or a pair), tokenized into
`Encoded` pieces that keep each piece's characters and word (`tokenize_texts`), the pieces of
each word grouped back (`word_groups`, `WordRef`), and texts batched with neighbours of (nearly)
the same length (`plan_batches`), for `bertkit.embeddings.embedder`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bertkit.text.tokenizer import cut_warning

Text = str | tuple[str, str]
"""One input: a text, or a pair (text A, text B) encoded as [CLS] A [SEP] B [SEP]."""


@dataclass
class Encoded:
    """One tokenized input, with what is needed to map pieces back to words and characters."""

    ids: np.ndarray
    """[T] token ids, [CLS] ... [SEP] (... [SEP])."""
    type_ids: np.ndarray
    """[T] segment ids."""
    offsets: np.ndarray
    """[T, 2] character span of each piece in its segment's text; (0, 0) for special tokens."""
    word_ids: np.ndarray
    """[T] index of the word each piece came from within its segment, -1 for special tokens."""
    segment: np.ndarray
    """[T] 0 for text A, 1 for text B, -1 for special tokens."""
    truncated: bool

    def window(self, held: np.ndarray) -> "Encoded":
        """The input made of the positions `held` of this one: a window of a long input
        (`bertkit.text.windows`), run as an input of its own."""
        return Encoded(self.ids[held], self.type_ids[held], self.offsets[held],
                       self.word_ids[held], self.segment[held], False)


@dataclass
class WordRef:
    """Which word of which input a row of `Embedder.words` is."""

    item: int
    """Index of the input text."""
    word: int
    """Index of the word within its segment (0-based, as the tokenizer splits words)."""
    segment: int
    """0 for text A, 1 for text B of a pair."""
    start: int
    end: int
    """Character span of the word in its segment's text."""
    text: str


def word_groups(encoded: Sequence[Encoded],
                texts: Sequence[Text]) -> tuple[list[list[np.ndarray]], list[WordRef]]:
    """For each input, the piece positions of each of its words, and a WordRef per word."""
    groups, refs = [], []
    for item, (e, text) in enumerate(zip(encoded, texts)):
        parts = (text,) if isinstance(text, str) else text
        # A word is a run of pieces with the same (segment, word id); specials have word -1.
        key = e.segment.astype(np.int64) * (1 << 32) + e.word_ids
        real = np.flatnonzero(e.word_ids >= 0)
        mine = []
        if real.size:
            starts = real[np.r_[True, key[real][1:] != key[real][:-1]]]
            ends = np.r_[starts[1:], real[-1] + 1]
            for s, t in zip(starts, ends):
                positions = s + np.flatnonzero(key[s:t] == key[s])
                seg = int(e.segment[s])
                a, b = int(e.offsets[positions[0], 0]), int(e.offsets[positions[-1], 1])
                mine.append(positions)
                refs.append(WordRef(item, int(e.word_ids[s]), seg, a, b, parts[seg][a:b]))
        groups.append(mine)
    return groups, refs


def tokenize_texts(tokenizer, texts: Sequence[Text], max_length: int, truncation: bool,
                   names: Sequence[str] | None = None, lowercase: bool = False) -> list[Encoded]:
    """One Encoded per text, through bertkit's Tokenizer. Over-long texts are cut to
    max_length (flagged `truncated`) or, with `truncation=False`, rejected (UserError).
    `lowercase`: texts are lowercased first, as sentence-transformers' do_lower_case."""
    if lowercase:
        texts = [t.lower() if isinstance(t, str) else (t[0].lower(), t[1].lower())
                 for t in texts]
    firsts = [t if isinstance(t, str) else t[0] for t in texts]
    seconds = [None if isinstance(t, str) else t[1] for t in texts]
    pairs = seconds if any(p is not None for p in seconds) else None
    batch = tokenizer.encode_batch(firsts, pairs, max_length=None if truncation else max_length,
                                   truncation=False, names=names)
    encodings = list(batch)
    over = np.flatnonzero(batch.lengths > max_length)
    if len(over):  # only the few over-long texts are tokenized a second time
        cut = tokenizer.encode_batch([firsts[i] for i in over],
                                     None if pairs is None else [pairs[i] for i in over],
                                     max_length=max_length, truncation="longest_first")
        for i, enc in zip(over, cut):
            encodings[i] = enc
    out = []
    for enc, was_cut in zip(encodings, batch.lengths > max_length):
        word_ids = np.array([-1 if w is None else w for w in enc.word_ids], dtype=np.int64)
        types = np.asarray(enc.type_ids, dtype=np.int64)
        out.append(Encoded(np.asarray(enc.ids, dtype=np.int64), types,
                           np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2), word_ids,
                           np.where(word_ids >= 0, types, -1), bool(was_cut)))
    return out


def plan_batches(lengths: np.ndarray, batch_size: int, max_padding: float = 0.0) -> list[np.ndarray]:
    """Group texts into batches of at most `batch_size`, longest first, so that padding is at
    most `max_padding` of each batch's positions (0: only texts of equal length share a
    batch, so no position is padding and attention needs no mask).

    Longest first: a batch too big for memory fails at once rather than at the end.
    """
    order = np.argsort(-lengths, kind="stable")
    batches, current, real = [], [], 0
    for i in order:
        n = len(current)
        if current:
            width = int(lengths[current[0]])
            if n < batch_size and width * (n + 1) - (real + lengths[i]) <= max_padding * width * (n + 1):
                current.append(i)
                real += int(lengths[i])
                continue
            batches.append(np.asarray(current))
        current, real = [i], int(lengths[i])
    if current:
        batches.append(np.asarray(current))
    return batches


def warn_truncated(encoded: Sequence[Encoded], max_length: int) -> None:
    cut_warning(sum(e.truncated for e in encoded), len(encoded), max_length, stacklevel=3)
