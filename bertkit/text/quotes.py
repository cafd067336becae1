"""Typographic quotes read as plain ones: a step of the normalizer of every vocabulary bertkit
trains, which tokenizer.json carries, so that "don’t" and "don't" are the same pieces.

Apart from the tokenizer because the tokenizing workers of `prepare` need these patterns and
nothing else of it: a worker that imports only `tokenizers` starts in a fraction of a second.
"""
from __future__ import annotations

import tokenizers
from tokenizers import normalizers

PLAIN_QUOTES = (("[\u2018\u2019\u201a\u201b]", "'"),
                ("[\u201c\u201d\u201e\u201f]", '"'))
"""(pattern, replacement) of the normalizer steps that read typographic quotes as plain ones:
‘ ’ ‚ ‛ as ', “ ” „ ‟ as " (one character for one, so offsets still point into the text)."""


def quote_steps() -> list[normalizers.Normalizer]:
    """The normalizer steps of `PLAIN_QUOTES`."""
    return [normalizers.Replace(tokenizers.Regex(pattern), plain)
            for pattern, plain in PLAIN_QUOTES]


def has_plain_quotes(normalizer: dict) -> bool:
    """Whether a tokenizer.json normalizer holds the steps of `PLAIN_QUOTES`."""
    steps = normalizer.get("normalizers", [normalizer])
    patterns = {(step.get("pattern", {}).get("Regex"), step.get("content"))
                for step in steps if step.get("type") == "Replace"}
    return set(PLAIN_QUOTES) <= patterns
