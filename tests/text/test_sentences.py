"""Sentence splitting: ends after . ! ? … before a capital or a digit, never after an
abbreviation or an initial, with quotes and brackets around; always at the end of a line."""
from __future__ import annotations

import numpy as np
import pytest

from bertkit.text.sentences import sentence_ends, split_sentences, word_flags


@pytest.mark.parametrize("line, sentences", [
    ("Mr. Smith went home. He slept.", ["Mr. Smith went home.", "He slept."]),
    ("J. Austen wrote it. Then she left!", ["J. Austen wrote it.", "Then she left!"]),
    ("Tools, e.g. Hammers, etc. And more?", ["Tools, e.g. Hammers, etc. And more?"]),
    ("Go. \u201cWhy?\u201d she asked. (Nobody knew.) 3 left.",
     ["Go.", "\u201cWhy?\u201d she asked.", "(Nobody knew.)", "3 left."]),
    ("Wait\u2026 Now it ends.", ["Wait\u2026", "Now it ends."]),
    ("no capital. so one sentence", ["no capital. so one sentence"]),
    ("Two  spaces.  Here.", ["Two spaces.", "Here."]),
    ("", []),
])
def test_split_sentences(line, sentences):
    assert split_sentences(line) == sentences


def test_word_flags():
    ends, starts = word_flags(["Dr.", "end.", "x.", "\u2019quoted.\u2019", "(Open", "7th", "low"])
    assert ends == [False, True, False, True, False, False, False]
    assert starts == [True, False, False, False, True, True, False]


def test_a_line_end_always_ends_a_sentence():
    can_end = np.array([False, False, True, False])
    can_start = np.array([True, True, True, True])
    same_line = np.array([True, False, True])  # words 0-1 on one line, 2-3 on the next
    assert sentence_ends(can_end, can_start, same_line).tolist() == [False, True, True, True]
