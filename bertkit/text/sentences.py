"""Sentence splitting: where a line of text ends a sentence, decided one word at a time.

A line is cut into words at spaces. A sentence ends after a word that can end one (it ends in
`.`, `!`, `?` or `…`, perhaps followed by closing quotes or brackets, and is not an
abbreviation such as "Mr." or an initial such as "J.") when the next word can start one (it
begins, after any opening quotes or brackets, with a capital letter or a digit), and at the end
of every line. Lines are paragraphs: a sentence never crosses one.

Because the decision depends only on each word and its neighbour, corpus preparation
(`bertkit.pretraining.wordcache`) computes the two flags once per *distinct* word and finds the
boundaries of a whole chunk with `sentence_ends`, in numpy; `split_sentences` does the same for
one line.
"""
from __future__ import annotations

import re

import numpy as np

ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof rev gen col capt lt sgt mt ft vs etc e.g i.e vol fig "
    "jan feb mar apr jun jul aug sep sept oct nov dec inc ltd co corp dept est approx".split())
"""Lower-cased words that a full stop does not end a sentence after."""
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u2019\u201d)\]]*$")
_OPENERS = "\"'\u201c\u2018([{"
_CLOSERS = "\"'\u2019\u201d)]"


def word_flags(words: list[str]) -> tuple[list[bool], list[bool]]:
    """For each word: (it can end a sentence, it can start one). "Mr." and "J." end none."""
    ends = [m is not None for m in map(_SENTENCE_END.search, words)]
    for i in [i for i, e in enumerate(ends) if e and words[i].rstrip(_CLOSERS).endswith(".")]:
        core = words[i].lstrip(_OPENERS).rstrip(_CLOSERS)[:-1].lower()
        ends[i] = not (core in ABBREVIATIONS or len(core) == 1)
    heads = [w.lstrip(_OPENERS)[:1] for w in words]
    return ends, [h.isupper() or h.isdigit() for h in heads]


def sentence_ends(can_end: np.ndarray, can_start: np.ndarray,
                  same_line: np.ndarray) -> np.ndarray:
    """bool [N]: a sentence ends after word i. can_end, can_start: [N] the flags of each
    word; same_line: [N - 1] words i and i + 1 are on one line."""
    end = np.ones(len(can_end), dtype=bool)
    end[:-1] = ~same_line | (can_end[:-1] & can_start[1:])
    return end


def split_sentences(line: str) -> list[str]:
    """The sentences of one line of text, as runs of its space-separated words."""
    words = [w for w in line.split(" ") if w]
    if not words:
        return []
    ends, starts = word_flags(words)
    end = sentence_ends(np.asarray(ends), np.asarray(starts), np.ones(len(words) - 1, bool))
    bounds = np.r_[0, np.flatnonzero(end) + 1]
    return [" ".join(words[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


__all__ = ["ABBREVIATIONS", "word_flags", "sentence_ends", "split_sentences"]
