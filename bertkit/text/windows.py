"""Long inputs read in overlapping windows, where cutting them is the default.

An input longer than the model's positions (or `--max-length`) loses its end by default, as
sentence-transformers and transformers' pipelines cut it. `--long-inputs windows` reads it
whole instead: its last text's pieces are split into windows of the model's length, each
starting half a window after the one before (the last one ends where the text ends), and
each window is run as an input of its own, [CLS] and [SEP] around it, a pair's first text
kept whole before it:

    [CLS] A[a:b] [SEP]            or            [CLS] A [SEP] B[a:b] [SEP]

A piece that several windows hold takes its result from the window where it is most central,
farthest from that window's edges, so with the most context on both sides: the rule of the
original BERT's SQuAD code (`run_squad.py`'s `_check_is_max_context`, beside its
`doc_stride`). As every window has the same length, that is the window whose centre is
nearest, the earlier one on a tie. The positions every window holds (the special tokens, a
pair's first text) belong to none of them: `Windows.assemble` gives them the mean of the
windows' results. An input that fits is one window, itself, so its results are those of the
whole input exactly.

Each reader of windows pools as its task says (the embeddings and fine-tuning guides list the
rules); this module only splits and assigns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bertkit.files import UserError

@dataclass(frozen=True)
class Windows:
    """The windows of one input of `length` positions."""

    positions: list[np.ndarray]
    """Per window, the positions of the whole input it holds, in order."""
    owner: np.ndarray
    """[length] the window each position takes its result from (0 for shared positions)."""
    shared: np.ndarray
    """[length] bool: every window holds the position (specials, a pair's first text)."""

    def owned(self, window: int) -> np.ndarray:
        """bool per position of `window`: it is the window the position takes its result
        from (shared positions are owned by every window)."""
        held = self.positions[window]
        return (self.owner[held] == window) | self.shared[held]

    def assemble(self, results: Sequence[np.ndarray]) -> np.ndarray:
        """[length, ...] per position of the whole input: from `results[w]` ([len(window w),
        ...] per window), each position's value in the window where it is most central, and a
        shared position's mean over the windows."""
        out = np.zeros((len(self.owner),) + results[0].shape[1:], dtype=results[0].dtype)
        for w, (held, values) in enumerate(zip(self.positions, results)):
            mine = self.owner[held] == w
            out[held[mine & ~self.shared[held]]] = values[mine & ~self.shared[held]]
            out[held[self.shared[held]]] += values[self.shared[held]] / len(self.positions)
        return out


def windowed_span(type_ids: Sequence[int]) -> tuple[int, int]:
    """[lo, hi): the positions the windows move over in BERT's template: the second text's
    pieces of a pair (segment 1, its [SEP] left out), else those between [CLS] and [SEP]."""
    types = np.asarray(type_ids)
    second = np.flatnonzero(types == 1)
    return (int(second[0]) if len(second) else 1), len(types) - 1


def window_starts(pieces: int, room: int) -> np.ndarray:
    """The first piece of each window of `room` pieces over `pieces`: half a window apart,
    the last one ending at the end."""
    if pieces <= room:
        return np.zeros(1, dtype=np.int64)
    stride = max(1, room // 2)
    starts = np.arange(0, pieces - room, stride)
    return np.append(starts, pieces - room).astype(np.int64)


def central_window(starts: np.ndarray, room: int, pieces: int) -> np.ndarray:
    """[pieces] for each piece, the window (of `room` pieces, at `starts`) whose centre is
    nearest: where it is farthest from an edge. The earlier window on a tie."""
    centres = starts + (room - 1) / 2
    j = np.arange(pieces)
    after = np.clip(np.searchsorted(centres, j), 0, len(starts) - 1)
    before = np.maximum(after - 1, 0)
    return np.where(j - centres[before] <= centres[after] - j, before, after)


def split(length: int, span: tuple[int, int], max_length: int, where: str = "input") -> Windows:
    """The windows of an input of `length` positions whose positions `span` [lo, hi) are
    windowed and the rest held by every window, each at most `max_length` long. UserError
    naming `where` when the rest leaves no room (a pair's first text too long)."""
    lo, hi = span
    room = max_length - (length - (hi - lo))
    if hi - lo > room and room < 1:
        raise UserError(f"{where}: its first text ({length - (hi - lo)} tokens with the "
                        f"special ones) leaves no room in {max_length} tokens for a window "
                        f"of the second; shorten it")
    starts = window_starts(hi - lo, room)
    size = min(room, hi - lo)
    head, tail = np.arange(lo), np.arange(hi, length)
    positions = [np.concatenate([head, lo + s + np.arange(size), tail]) for s in starts]
    owner = np.zeros(length, dtype=np.int64)
    owner[lo:hi] = central_window(starts, size, hi - lo)
    shared = np.ones(length, dtype=bool)
    shared[lo:hi] = False
    return Windows(positions, owner, shared)


@dataclass(frozen=True)
class WindowRows:
    """Single texts encoded back to back ([CLS] ... [SEP] each), as windows back to back."""

    source: np.ndarray
    """[P] per piece of the windows, its index among the texts' pieces."""
    lengths: np.ndarray
    """[R] each window's length."""
    text_of: np.ndarray
    """[R] the text each window is of."""
    owned: np.ndarray
    """[P] bool: the piece is in the window where it is most central (specials: always)."""


def window_rows(lengths: np.ndarray, max_length: int) -> WindowRows:
    """The windows of texts of `lengths` encoded back to back, each at most `max_length`
    long; a text that fits is one window, itself."""
    source, sizes, text_of, owned = [], [], [], []
    start = 0
    for text, n in enumerate(np.asarray(lengths).tolist()):
        if n <= max_length:
            parts = [(np.arange(n), np.ones(n, dtype=bool))]
        else:
            w = split(n, (1, n - 1), max_length)
            parts = [(held, w.owned(k)) for k, held in enumerate(w.positions)]
        for held, mine in parts:
            source.append(start + held)
            owned.append(mine)
            sizes.append(len(held))
            text_of.append(text)
        start += n
    if not source:
        return WindowRows(*(np.zeros(0, dtype=np.int64),) * 3, np.zeros(0, dtype=bool))
    return WindowRows(np.concatenate(source), np.asarray(sizes, dtype=np.int64),
                      np.asarray(text_of, dtype=np.int64), np.concatenate(owned))


__all__ = ["Windows", "windowed_span", "window_starts", "central_window",
           "split", "WindowRows", "window_rows"]
