"""Tagging schemes (IO, BIO, BIOES), conversions between them, entity spans, and the alignment
of word-level labels with subword pieces.

A chunk tag is `P-TYPE` with P one of B, I, E, S, or the single tag `O`. Anything else (UPOS
tags such as `NOUN`, XPOS tags such as `NNP`) is a plain label: copied as it is, never chunked.

Spans are `(start, end, type)` with `end` exclusive, in word (or subword) positions.

Chunking follows conlleval, the rules `seqeval` uses in its default mode, so that ill-formed
sequences (I-X after O, E-X without B-X, a type change inside a chunk) give the same entities
here as in the published scores: an I-X or E-X after O or after another type starts a chunk.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from bertkit.model.heads import IGNORE_INDEX

SCHEMES = ("IO", "BIO", "BIOES")
Span = tuple[int, int, str]


def split_tag(tag: str) -> tuple[str, str]:
    """`B-PER` -> (`B`, `PER`); `O` -> (`O`, ``); a plain label `NOUN` -> (``, `NOUN`)."""
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[1] == "-" and tag[0] in "BIES":
        return tag[0], tag[2:]
    return "", tag


def is_chunk_tag(tag: str) -> bool:
    return split_tag(tag)[0] != ""


def has_entities(tags: Iterable[str]) -> bool:
    """Whether a tag set marks entities (B-/I-/E-/S- tags) rather than plain labels (POS)."""
    return any(is_chunk_tag(t) and t != "O" for t in tags)


def detect_scheme(tags: Iterable[str]) -> str:
    """The smallest scheme whose prefixes cover `tags` (IO when only I- and O occur)."""
    prefixes = {split_tag(t)[0] for t in tags}
    if prefixes & {"E", "S"}:
        return "BIOES"
    if "B" in prefixes:
        return "BIO"
    return "IO"


def _chunk_end(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    # conlleval: a chunk ends before this token when the previous token closed it (E, S), when
    # this token opens a new one or is outside, or when the type changes.
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _chunk_start(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def _conll_parts(tag: str) -> tuple[str, str]:
    # conlleval reads the first character as the prefix and the rest after one '-' as the type,
    # whatever the tag looks like; an empty type is '_' (seqeval's convention).
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def tags_to_spans(tags: Sequence[str]) -> list[Span]:
    """Entity spans of one sentence's tags, chunked the conlleval / seqeval-default way."""
    spans: list[Span] = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, chunk in enumerate([*tags, "O"]):
        tag, type_ = _conll_parts(chunk)
        if _chunk_end(prev_tag, tag, prev_type, type_):
            spans.append((begin, i, prev_type))
        if _chunk_start(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return spans


def spans_to_tags(spans: Iterable[Span], length: int, scheme: str = "BIO") -> list[str]:
    """Tags of `length` tokens marking non-overlapping `spans` in `scheme`.

    IO cannot mark where two adjacent entities of one type meet; they merge.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r} (expected one of {SCHEMES})")
    tags = ["O"] * length
    for start, end, type_ in sorted(spans):
        if not 0 <= start < end <= length:
            raise ValueError(f"span ({start}, {end}) outside a sentence of {length} tokens")
        if any(t != "O" for t in tags[start:end]):
            raise ValueError(f"span ({start}, {end}, {type_}) overlaps another span")
        tags[start:end] = [f"I-{type_}"] * (end - start)
        if scheme == "BIO":
            tags[start] = f"B-{type_}"
        elif scheme == "BIOES":
            if end - start == 1:
                tags[start] = f"S-{type_}"
            else:
                tags[start], tags[end - 1] = f"B-{type_}", f"E-{type_}"
    return tags


def convert_tags(tags: Sequence[str], scheme: str) -> list[str]:
    """Re-tag a sentence in `scheme`. BIO <-> BIOES is exact; a sentence with plain labels (POS)
    is returned unchanged."""
    if any(split_tag(t)[0] == "" for t in tags):
        return list(tags)
    return spans_to_tags(tags_to_spans(tags), len(tags), scheme)


def tag_label_set(tags: Iterable[str], scheme: str | None = None) -> list[str]:
    """Labels for a tagging model: every prefix of `scheme` for each entity type seen, so that a
    type seen only as B-X in training can still be continued (I-X) over later subword pieces.
    Order: 'O' first, then sorted. Plain labels (POS) are kept as seen, sorted."""
    tags = set(tags)
    scheme = scheme or detect_scheme(tags)
    prefixes = {"IO": "I", "BIO": "BI", "BIOES": "BIES"}[scheme]
    labels: set[str] = set()
    for t in tags:
        prefix, type_ = split_tag(t)
        if prefix in ("", "O"):
            labels.add(t)
        else:
            labels.update(f"{p}-{type_}" for p in prefixes)
    return sorted(labels, key=lambda t: (t != "O", t))


def _piece_tags(tag: str, n: int) -> list[str]:
    # A word tag spread over n pieces: the chunk opens on the first piece and closes on the
    # last, so a valid word sequence stays valid over the pieces (which a CRF needs).
    prefix, type_ = split_tag(tag)
    if n == 1 or prefix in ("", "O", "I"):
        return [tag] * n
    first = "B" if prefix in ("B", "S") else "I"
    last = "E" if prefix in ("E", "S") else "I"
    return [f"{first}-{type_}"] + [f"I-{type_}"] * (n - 2) + [f"{last}-{type_}"]


def align_labels(word_ids: Sequence[int | None], word_tags: Sequence[str],
                 label_index: dict[str, int], mode: str = "copy") -> list[int]:
    """Label ids for the subword pieces of one encoding; IGNORE_INDEX on special tokens.

    word_ids: per piece, the index of its word (None for [CLS], [SEP], padding), as given by
    `tokenizers.Encoding.word_ids` for a pre-tokenized input. Pieces of a word must be
    contiguous; a word may be absent (cut by truncation).
    mode "copy": every piece carries its word's tag, except that a chunk opens only on the
    word's first piece and closes only on its last: B-X continues as I-X on later pieces, and
    in BIOES S-X becomes B-X ... E-X and E-X I-X ... E-X (O and I-X are copied unchanged).
    Jurafsky & Martin's plain copy (Speech and Language Processing, 11.4.3) gives every piece
    the word's tag unchanged, B-X on each, which reads as several chunks at the piece level;
    this one keeps the pieces a valid sequence of the scheme, as a CRF over pieces needs.
    mode "first": only the first piece of each word carries a label; the rest are ignored.
    """
    if mode not in ("copy", "first"):
        raise ValueError(f"unknown alignment mode {mode!r} (expected 'copy' or 'first')")
    out = [IGNORE_INDEX] * len(word_ids)
    i = 0
    while i < len(word_ids):
        w = word_ids[i]
        if w is None:
            i += 1
            continue
        j = i
        while j < len(word_ids) and word_ids[j] == w:
            j += 1
        if mode == "first":
            out[i] = label_index[word_tags[w]]
        else:
            out[i:j] = [label_index[t] for t in _piece_tags(word_tags[w], j - i)]
        i = j
    return out


def word_tags_from_pieces(piece_tags: Sequence[str | None], word_ids: Sequence[int | None],
                          mode: str = "copy", num_words: int | None = None) -> list[str]:
    """Word tags from per-piece tags (None where nothing was predicted), inverting
    `align_labels`. mode "first": each word takes its first piece's tag. mode "copy": the first
    piece gives the type and whether the chunk opens there, the last piece whether it closes
    (E-/S- of the same type), so BIOES words split into B-X ... E-X come back as S-X.
    Words without pieces (cut by truncation) get 'O'."""
    if mode not in ("copy", "first"):
        raise ValueError(f"unknown alignment mode {mode!r} (expected 'copy' or 'first')")
    if num_words is None:
        num_words = max((w for w in word_ids if w is not None), default=-1) + 1
    first: dict[int, str] = {}
    last: dict[int, str] = {}
    for tag, w in zip(piece_tags, word_ids):
        if w is None or tag is None:
            continue
        first.setdefault(w, tag)
        last[w] = tag
    words = []
    for w in range(num_words):
        tag = first.get(w, "O")
        prefix, type_ = split_tag(tag)
        if mode == "first" or prefix in ("", "O"):
            words.append(tag)
            continue
        end_prefix, end_type = split_tag(last[w])
        opens = prefix in ("B", "S")
        closes = end_type == type_ and end_prefix in ("E", "S")
        words.append(f"{'S' if opens and closes else 'B' if opens else 'E' if closes else 'I'}"
                     f"-{type_}")
    return words


def word_scores(scores: torch.Tensor, word_ids: Sequence[int | None], how: str = "first",
                num_words: int | None = None) -> torch.Tensor:
    """Per-word scores [W, K] from per-piece scores [T, K]: the first piece's (Jurafsky &
    Martin's simplest decoding) or the mean over the word's pieces. Words without pieces score zero."""
    if how not in ("first", "mean"):
        raise ValueError(f"unknown word pooling {how!r} (expected 'first' or 'mean')")
    ids = torch.tensor([-1 if w is None else w for w in word_ids], dtype=torch.long,
                       device=scores.device)
    W = num_words if num_words is not None else int(ids.max().item()) + 1 if len(ids) else 0
    keep = ids >= 0
    if how == "first":
        is_first = keep.clone()
        is_first[1:] &= ids[1:] != ids[:-1]
        out = scores.new_zeros(W, scores.shape[1])
        out[ids[is_first]] = scores[is_first]
        return out
    total = scores.new_zeros(W, scores.shape[1]).index_add_(0, ids[keep], scores[keep])
    count = torch.bincount(ids[keep], minlength=W).clamp(min=1).to(scores.dtype)
    return total / count[:, None]
