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
("▁film." or "▁film,"), so there the candidate is the word's leading run of letters and digits,
and its count gathers every occurrence ("▁film" from "▁film" and "▁film.": n is then what the
estimate assumes, that "▁film." becomes "▁film" + "."). WordPiece's pre-tokenizer cuts
punctuation off, but not symbols: an emoji, "©" or "°" is no Unicode punctuation, so "great😀"
is one word. Its leading run "great" is counted there too (`NewWord.glued`) where the word's
pieces have a boundary at the run's end (g ##r ##e ##a ##t ##😀, not g ##r ##e ##a ##t😀), and
nowhere else. There the run saves exactly what it saves alone: its pieces in the word are its
pieces alone (each the longest match, and none crossed its end), and once it is added the word
is the run + the same pieces after it (no piece, old or new, is a longer prefix of the word: an
old one would have been matched first, and a new word is letters and digits, which end where
the run ends; the pieces after it are "##" pieces, of which `extend_tokenizer` adds none: the
characters' come before the words are chosen). The chosen words take the ids after the last
one, in that order; every old piece keeps its id, so an old model's rows still mean what they
meant.

WordPiece matches the longest piece at the start of a word, so a whole word in the vocabulary
is always one piece, and a word glued to a symbol starts with it as above. A Unigram vocabulary
picks the segmentation with the highest total score, so a new word's piece scores `MARGIN` +
0.01 x its length above the best segmentation the old pieces gave it: it beats every split into
old pieces, and a split that starts with a shorter new word (the only other kind: new pieces
start a word) scores at most the old best + `MARGIN` + 0.01 x that shorter length. Either way
each new word is one token, and each WordPiece word it was counted in is the new piece + the
pieces that followed the run before, which `extend_tokenizer` checks.

A character that the vocabulary lacks makes a WordPiece word one [UNK] (it has no piece to
start or continue the word with) and is one [UNK] in a Unigram word (with the unknown
characters next to it: `tokenizers` fuses them, and this Unigram has no byte fallback). Such a
word saves nothing as a count of pieces, and the text loses what it said. So the characters
of the domain's [UNK]s, seen at least `min_count` times there, come first (`missing_chars`,
`add_chars`): each a piece of its own, for WordPiece both "c" at the start of a word and "##c"
inside one (only "c" where the pre-tokenizer always cuts c off as a word of its own: CJK,
punctuation), for Unigram "c" with the score `tokenizers` gave the unknown character, so that
every segmentation stays what it was with the character in place of the [UNK]. The words are
then chosen against the vocabulary with those characters, so a word that was [UNK] ("café"
in a cased vocabulary without "é") is a candidate like any other, with its true saving.
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
from bertkit.text.vocab import continuation_pieces, words_of

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
    """Occurrences in the domain text: alone, or starting a word of `glued` (Unigram: with
    punctuation after it)."""
    pieces: tuple[int, ...]
    """The ids of the pieces the word was split into: old pieces, or new characters' (the
    words are chosen against the vocabulary with its new characters)."""
    glued: tuple[str, ...] = ()
    """WordPiece: the domain's words that start with this one glued to a symbol ("great😀"),
    whose occurrences `count` holds (see the module docstring)."""

    @property
    def saving(self) -> int:
        """Pieces saved over the domain text: count x (pieces - 1)."""
        return self.count * (len(self.pieces) - 1)


@dataclass(frozen=True)
class NewChar:
    """A character of the domain that the vocabulary lacks, and the pieces that add it."""
    char: str
    count: int
    """Its occurrences in the domain's words that the vocabulary read with an [UNK]."""
    pieces: tuple[str, ...]
    """The pieces it adds: WordPiece "c" and "##c", those of them the vocabulary lacks and the
    pre-tokenizer lets occur; Unigram "c"."""


def count_words(tokenizer: Tokenizer, sources: Sequence[Source],
                progress: bool = True) -> Counter:
    """How often each word (as the vocabulary reads it) occurs in the domain text: `sources`
    as `bertkit.text.sources.expand` gives them, in any format `prepare` reads (of JSON lines
    and tables, the text field alone)."""
    split = words_of(tokenizer.backend)
    counts: Counter = Counter()
    report = Progress("counting words", None, "paragraphs", counts=("words",),
                      enabled=progress)
    for paragraph in paragraphs(sources):
        words = split(paragraph)
        counts.update(words)
        report.update(add=1, words=len(words))
    report.finish()
    return counts


def check_request(add: int, min_count: int, max_chars: int | None = None) -> None:
    """UserError unless something is asked for (words, or characters: `max_chars` None is
    all of them), seen at least once, and neither number is negative."""
    if add < 0:
        raise UserError(f"--add must be 0 or more, got {add}")
    if min_count < 1:
        raise UserError(f"--min-count must be at least 1, got {min_count}")
    if max_chars is not None and max_chars < 0:
        raise UserError(f"--max-chars must be 0 or more, got {max_chars}")
    if add == 0 and max_chars == 0:
        raise UserError("--add 0 and --max-chars 0: nothing asked for")


def missing_chars(tokenizer: Tokenizer, counts: Counter, min_count: int = 2,
                  limit: int | None = None) -> list[NewChar]:
    """The characters of the domain's [UNK]s that the vocabulary lacks, seen at least
    `min_count` times there, most frequent first (ties by the character), at most `limit`.
    Only printable characters: a space or control character never reaches a word."""
    check_request(1, min_count, limit)
    model, vocab, unk = tokenizer.backend.model, tokenizer.get_vocab(), tokenizer.unk_id
    found: Counter = Counter()
    for word, n in counts.items():
        raw = word.encode("utf-8")  # the model's offsets count bytes
        for token in model.tokenize(word):
            if token.id == unk:
                found.update({c: n * k for c, k in
                              Counter(raw[slice(*token.offsets)].decode("utf-8")).items()})
    chars = [c for c in found if c.isprintable() and not c.isspace()]
    inside = set(continuation_pieces(tokenizer.backend, set(chars))) \
        if tokenizer.kind == "wordpiece" else set()
    new = []
    for c in chars:
        pieces = tuple(p for p in (c, "##" + c) if p not in vocab
                       and (p == c or p in inside))
        if pieces and found[c] >= min_count:
            new.append(NewChar(c, found[c], pieces))
    new.sort(key=lambda c: (-c.count, c.char))
    return new[:limit]


def choose_words(tokenizer: Tokenizer, counts: Counter, add: int,
                 min_count: int = 2) -> list[NewWord]:
    """The `add` words of `counts` that save the most pieces (see the module docstring);
    fewer when fewer words would save any."""
    check_request(add, min_count)
    model, vocab = tokenizer.backend.model, tokenizer.get_vocab()
    candidates, glued = _candidates(tokenizer, counts)
    found = []
    for word, n in candidates.items():
        if n < min_count or word in vocab:
            continue
        pieces = tuple(t.id for t in model.tokenize(word))
        if len(pieces) > 1:
            found.append(NewWord(word, n, pieces, tuple(glued.get(word, ()))))
    found.sort(key=lambda w: (-w.saving, w.word))
    return found[:add]


def _candidates(tokenizer: Tokenizer, counts: Counter
                ) -> tuple[Counter, dict[str, list[str]]]:
    """The words that may be added, with their counts, and the WordPiece words glued to a
    symbol that each was counted in (see the module docstring)."""
    if tokenizer.kind == "unigram":
        found: Counter = Counter()
        for word, n in counts.items():
            run = m.group() if (m := _WORD.match(word)) else ""
            if run.startswith("\u2581") and len(run) > 1:
                found[run] += n
        return found, {}
    found, glued = Counter(), {}
    for word, n in counts.items():  # the pre-tokenizer cut punctuation off already
        if not (m := _WORD.match(word)):
            continue
        if m.end() == len(word):
            found[word] += n
        elif _piece_ends_at(tokenizer, word, m.group()):
            found[m.group()] += n
            glued.setdefault(m.group(), []).append(word)
    return found, glued


def _piece_ends_at(tokenizer: Tokenizer, word: str, run: str) -> bool:
    """Whether a piece of `word` ends where its leading `run` does (offsets count bytes)."""
    end = len(run.encode("utf-8"))
    return any(t.offsets[1] == end for t in tokenizer.backend.model.tokenize(word))


def domain_pieces(tokenizer: Tokenizer, counts: Counter) -> int:
    """Pieces of the whole text whose words are `counts`: sum of count x pieces."""
    model = tokenizer.backend.model
    return sum(n * len(model.tokenize(word)) for word, n in counts.items())


def domain_unknown(tokenizer: Tokenizer, counts: Counter) -> int:
    """[UNK]s of the whole text whose words are `counts`."""
    model, unk = tokenizer.backend.model, tokenizer.unk_id
    return sum(n * sum(t.id == unk for t in model.tokenize(word)) for word, n in counts.items())


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


def _scores(tokenizer: Tokenizer) -> tuple[list[float], float]:
    """A Unigram vocabulary's scores by id, and the score `tokenizers` gives an unknown
    character."""
    scores = [score for _, score in json.loads(tokenizer.backend.to_str())["model"]["vocab"]]
    return scores, min(scores) - _UNK_PENALTY


def _grown(tokenizer: Tokenizer, pieces: Sequence[tuple[str, float | None]]) -> Tokenizer:
    """A copy of `tokenizer` with `pieces` (piece, Unigram score) at ids vocab_size,
    vocab_size + 1, ... in order; the normalizer, pre-tokenizer, specials and template stay."""
    check_extendable(tokenizer)
    spec = json.loads(tokenizer.backend.to_str())
    first = tokenizer.vocab_size
    for i, (piece, score) in enumerate(pieces):
        if tokenizer.kind == "wordpiece":
            spec["model"]["vocab"][piece] = first + i
        else:
            spec["model"]["vocab"].append([piece, score])
    return Tokenizer(tokenizers.Tokenizer.from_str(json.dumps(spec)),
                     model_max_length=tokenizer.model_max_length, source="extended tokenizer")


def add_chars(tokenizer: Tokenizer, chars: Sequence[NewChar]) -> Tokenizer:
    """A copy of `tokenizer` with the pieces of each character (`NewChar.pieces`) at the ids
    after its last, in order; a Unigram piece scored as the unknown character was (see the
    module docstring). Each character is then read without [UNK], which is checked."""
    score = _scores(tokenizer)[1] if tokenizer.kind == "unigram" else None
    grown = _grown(tokenizer, [(p, score) for c in chars for p in c.pieces])
    model, vocab = grown.backend.model, grown.get_vocab()
    for c in chars:  # twice: at the start of a word and inside it, where it may be
        text = c.char * (2 if grown.kind == "unigram" or "##" + c.char in vocab else 1)
        if any(t.id == grown.unk_id for t in model.tokenize(text)):
            raise AssertionError(f"{text!r} is still [UNK] after adding {c.pieces}")
    return grown


def extend_tokenizer(tokenizer: Tokenizer, words: Sequence[NewWord]) -> Tokenizer:
    """A copy of `tokenizer` with each word a piece of its own, at ids vocab_size,
    vocab_size + 1, ... in order; the normalizer, pre-tokenizer, specials and template stay."""
    first = tokenizer.vocab_size
    if tokenizer.kind == "wordpiece":
        grown = _grown(tokenizer, [(w.word, None) for w in words])
    else:
        scores, unk = _scores(tokenizer)
        grown = _grown(tokenizer, [
            (w.word, sum(unk if p == tokenizer.unk_id else scores[p] for p in w.pieces)
             + MARGIN + 0.01 * len(w.word)) for w in words])
    model, old = grown.backend.model, tokenizer.backend.model
    for i, w in enumerate(words):  # the module docstring's argument, checked
        for word in (w.word, *w.glued):
            ids = [t.id for t in model.tokenize(word)]
            after = [t.id for t in old.tokenize(word)][len(w.pieces):]
            if ids != [first + i, *after]:
                raise AssertionError(f"{word!r} became {ids}, not the piece {first + i} "
                                     f"then {after}")
    return grown


def describe(words: Sequence[NewWord], tokenizer: Tokenizer, limit: int = 20) -> str:
    """`word (count x old pieces)` for the first `limit` words, for a summary line."""
    shown = [f"{w.word} ({w.count} x {' '.join(tokenizer.id_to_token(p) or UNK for p in w.pieces)})"
             for w in words[:limit]]
    return ", ".join(shown) + (f", ... ({len(words) - limit} more)" if len(words) > limit else "")


def describe_chars(chars: Sequence[NewChar], limit: int = 20) -> str:
    """`c (count x: pieces)` for the first `limit` characters, for a summary line."""
    shown = [f"{c.char} ({c.count} x: {' '.join(c.pieces)})" for c in chars[:limit]]
    return ", ".join(shown) + (f", ... ({len(chars) - limit} more)" if len(chars) > limit else "")
