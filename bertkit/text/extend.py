"""A vocabulary that grows: the words of a domain's text that save the most pieces, added to a
trained tokenizer as pieces of their own.

A word is what the tokenizer's normalizer and pre-tokenizer make of the text (lower-cased,
accents stripped, quotes made plain, cut at spaces and punctuation, as the vocabulary reads
it; a Unigram word carries its word-start mark `▁`). Adding a word that the vocabulary splits
into k pieces saves k - 1 pieces at each of its n occurrences, so the words are ranked by

    saving = n x (k - 1)

(ties by the word), among those seen at least `min_count` times and not already in the
vocabulary. A word is made of letters and digits only: no piece that glues a symbol to a word
is added. Unigram's pre-tokenizer cuts text at spaces alone, leaving punctuation on the word
("▁film." or "▁film,"), so there the candidate is the word's leading run of letters and
digits, and its count gathers every occurrence ("▁film" from "▁film" and "▁film.": n is then
what the estimate assumes, that "▁film." becomes "▁film" + "."). The chosen words take the ids after the last one, in that order; every old piece
keeps its id, so an old model's rows still mean what they meant.

WordPiece matches the longest piece at the start of a word, so a whole word in the vocabulary
is always one piece. A Unigram vocabulary picks the segmentation with the highest total score,
so a new word's piece scores `MARGIN` + 0.01 x its length above the best segmentation the
old pieces gave it: it beats every split into old pieces, and a split that starts with a
shorter new word (the only other kind: new pieces start a word) scores at most the old best +
`MARGIN` + 0.01 x that shorter length. Either way each new word is one token, which
`extend_tokenizer` checks.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import tokenizers

from bertkit.files import UserError
from bertkit.progress import Progress
from bertkit.text.sources import Source, paragraphs
from bertkit.text.tokenizer import UNK, Tokenizer

MARGIN = 1.0
"""How much more likely (in nats) a new Unigram piece is than its word's best old split."""
_WORD = re.compile(r"\u2581?[^\W_]+")  # a leading run of letters and digits (Unigram: with ▁)
_UNK_PENALTY = 10.0  # the Unigram model of `tokenizers` scores an unknown character min - 10


@dataclass(frozen=True)
class NewWord:
    """A word of the domain, as the vocabulary will hold it, and what adding it saves."""
    word: str
    """The piece: the normalized word (Unigram: with its `▁`)."""
    count: int
    """Occurrences in the domain text."""
    pieces: tuple[int, ...]
    """The ids of the old pieces the word was split into."""

    @property
    def saving(self) -> int:
        """Pieces saved over the domain text: count x (pieces - 1)."""
        return self.count * (len(self.pieces) - 1)


def count_words(tokenizer: Tokenizer, sources: Sequence[Source],
                progress: bool = True) -> Counter:
    """How often each word (as the vocabulary reads it) occurs in the domain text: `sources`
    as `bertkit.text.sources.expand` gives them, in any format `prepare` reads (of JSON lines
    and tables, the text field alone)."""
    backend = tokenizer.backend
    normalize = backend.normalizer.normalize_str if backend.normalizer else (lambda s: s)
    split = backend.pre_tokenizer.pre_tokenize_str if backend.pre_tokenizer \
        else (lambda s: [(w, None) for w in s.split()])
    counts: Counter = Counter()
    report = Progress("counting words", None, "paragraphs", counts=("words",),
                      enabled=progress)
    for paragraph in paragraphs(sources):
        words = [w for w, _ in split(normalize(paragraph))]
        counts.update(words)
        report.update(add=1, words=len(words))
    report.finish()
    return counts


def check_request(add: int, min_count: int) -> None:
    """UserError unless at least one word is asked for, seen at least once."""
    if add < 1:
        raise UserError(f"--add must be at least 1, got {add}")
    if min_count < 1:
        raise UserError(f"--min-count must be at least 1, got {min_count}")


def choose_words(tokenizer: Tokenizer, counts: Counter, add: int,
                 min_count: int = 2) -> list[NewWord]:
    """The `add` words of `counts` that save the most pieces (see the module docstring);
    fewer when fewer words would save any."""
    check_request(add, min_count)
    model, vocab = tokenizer.backend.model, tokenizer.get_vocab()
    found = []
    for word, n in _candidates(tokenizer, counts).items():
        if n < min_count or word in vocab:
            continue
        pieces = tuple(t.id for t in model.tokenize(word))
        if len(pieces) > 1:
            found.append(NewWord(word, n, pieces))
    found.sort(key=lambda w: (-w.saving, w.word))
    return found[:add]


def _candidates(tokenizer: Tokenizer, counts: Counter) -> Counter:
    """The words that may be added, with their counts (see the module docstring)."""
    if tokenizer.kind == "wordpiece":  # its pre-tokenizer cut punctuation off already
        return Counter({w: n for w, n in counts.items() if _WORD.fullmatch(w)})
    found: Counter = Counter()
    for word, n in counts.items():
        if (m := _WORD.match(word)) and m.group().startswith("\u2581") and len(m.group()) > 1:
            found[m.group()] += n
    return found


def domain_pieces(tokenizer: Tokenizer, counts: Counter) -> int:
    """Pieces of the whole text whose words are `counts`: sum of count x pieces."""
    model = tokenizer.backend.model
    return sum(n * len(model.tokenize(word)) for word, n in counts.items())


def check_extendable(tokenizer: Tokenizer, where: str | Path = "tokenizer") -> None:
    """UserError unless the tokenizer's ids are exactly 0 .. vocab_size - 1, its pieces: the
    new words' ids follow them."""
    if tokenizer.backend.get_vocab_size(with_added_tokens=False) != tokenizer.vocab_size:
        raise UserError(f"{where}: the tokenizer has added tokens past the ids of its "
                        f"vocabulary; bertkit extends only a vocabulary whose ids are its pieces")
    if (last := max(tokenizer.get_vocab().values())) != tokenizer.vocab_size - 1:
        raise UserError(f"{where}: the tokenizer's ids have gaps ({tokenizer.vocab_size} pieces, "
                        f"ids up to {last}: a piece listed twice?); bertkit extends only a "
                        f"vocabulary whose ids are 0 to its size - 1")


def extend_tokenizer(tokenizer: Tokenizer, words: Sequence[NewWord]) -> Tokenizer:
    """A copy of `tokenizer` with each word a piece of its own, at ids vocab_size,
    vocab_size + 1, ... in order; the normalizer, pre-tokenizer, specials and template stay."""
    check_extendable(tokenizer)
    spec = json.loads(tokenizer.backend.to_str())
    first = tokenizer.vocab_size
    if tokenizer.kind == "wordpiece":
        for i, w in enumerate(words):
            spec["model"]["vocab"][w.word] = first + i
    else:
        scores = [score for _, score in spec["model"]["vocab"]]
        unk = min(scores) - _UNK_PENALTY
        unk_id = tokenizer.unk_id
        for w in words:
            best = sum(unk if p == unk_id else scores[p] for p in w.pieces)
            spec["model"]["vocab"].append([w.word, best + MARGIN + 0.01 * len(w.word)])
    grown = Tokenizer(tokenizers.Tokenizer.from_str(json.dumps(spec)),
                      model_max_length=tokenizer.model_max_length, source="extended tokenizer")
    model = grown.backend.model
    for i, w in enumerate(words):
        ids = [t.id for t in model.tokenize(w.word)]
        if ids != [first + i]:  # the module docstring's argument, checked
            raise AssertionError(f"{w.word!r} became {ids}, not the one piece {first + i}")
    return grown


def describe(words: Sequence[NewWord], tokenizer: Tokenizer, limit: int = 20) -> str:
    """`word (count x old pieces)` for the first `limit` words, for a summary line."""
    shown = [f"{w.word} ({w.count} x {' '.join(tokenizer.id_to_token(p) or UNK for p in w.pieces)})"
             for w in words[:limit]]
    return ", ".join(shown) + (f", ... ({len(words) - limit} more)" if len(words) > limit else "")
