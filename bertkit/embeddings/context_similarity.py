"""A word in two contexts: the cosine between its contextual vectors in two texts, layer by
layer (the textbooks' "bank" example; `bertkit similarity`). Static vectors would give 1 at every
layer; BERT's drift apart as the layers mix the context in.
"""
from __future__ import annotations

import re

from bertkit.embeddings.standardize import unit_rows
from bertkit.files import UserError


def parse_span(text: str, span: str) -> tuple[int, int]:
    """A character span of `text`: "START:END", or a word (its first whole-word,
    case-insensitive occurrence)."""
    start, colon, end = span.partition(":")
    if colon and start.strip().isdigit() and end.strip().isdigit():
        a, b = int(start), int(end)
        if not 0 <= a < b <= len(text):
            raise UserError(f"span {span}: outside {text!r} ({len(text)} characters)")
        return a, b
    return find_word(text, span)


def context_similarity(embedder, text1: str, span1: tuple[int, int], text2: str,
                       span2: tuple[int, int]) -> list[float]:
    """Cosine between the contextual vectors of the word at text1[span1] and the word at
    text2[span2], one per hidden state of `embedder` (a bertkit.embeddings.Embedder): index 0
    the embedding layer, then each block. A word of several pieces is their mean."""
    out = []
    for layer in range(embedder.config.num_layers + 1):
        a, b = embedder.word_vectors([text1, text2], [span1, span2], layers=layer,
                                     subword_pool="mean")
        out.append(float(unit_rows(a) @ unit_rows(b)))
    return out


def find_word(text: str, word: str) -> tuple[int, int]:
    """Character span of the first whole-word, case-insensitive occurrence of `word`."""
    m = re.search(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", text, flags=re.IGNORECASE)
    if m is None:
        raise UserError(f"{word!r} does not occur as a word in {text!r}")
    return m.span()


__all__ = ["parse_span", "find_word", "context_similarity"]
