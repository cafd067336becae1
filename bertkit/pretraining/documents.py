"""The corpus read as documents: the first pass that checks the input and chooses the
held-out documents (`plan_documents`), and the reader that yields chunks of lines with their
document indices from a position it can resume at (`chunks`), for `bertkit.pretraining.corpus`.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from bertkit.text.sources import Source, read_units

_SPARE_DOCUMENTS = 100_000
"""Documents remembered (those the hash came nearest to holding out) to top up a short
held-out split: a bound on memory, and far more than a corpus that needs topping up has."""


@dataclass
class Position:
    """Where the reader stands in the input: enough to resume reading exactly there."""
    file: int = 0
    offset: int = 0
    line: int = 0
    doc: int = -1
    """Index of the last document started (documents are numbered from 0 in input order)."""
    in_doc: bool = False
    """The last line read was text (a following text line continues the same document)."""


def plan_documents(sources: list[Source], fraction: float) -> tuple[dict, list[int]]:
    """A first pass over the text: refuse bad input (not UTF-8, invalid JSON, a missing field,
    corrupt compressed data) before writing anything, and choose the held-out documents.
    Returns the layout and the bytes of text of each source (what reading positions count).

    Each document is held out with probability `fraction` (a hash of
    its index, so the choice is scattered through the corpus and repeatable), unless it is
    larger than 2 x fraction of the corpus (one huge document would make the held-out split
    lopsided). When chance leaves the held-out documents under half the asked share of the bytes
    (a small corpus), the documents whose hash came nearest are added until they reach it (none
    that would pass twice the share), so that a small corpus does not hold out one five-token
    document; at least one is held out when there are two or more. A corpus that is one
    document of text has its last 1% of lines (at least one) made a second, held-out
    document."""
    documents, first_doc_lines, size = 0, 0, 0
    chosen: list[tuple[int, int]] = []  # (doc, size) of the documents the hash holds out
    smallest = (float("inf"), -1)
    spare: list[tuple[float, int, int]] = []  # a max-heap on the hash: (-hash, doc, size)

    def close(doc: int, size: int) -> None:
        nonlocal smallest
        if doc < 0:
            return
        h = _unit_hash(doc)
        if h < fraction:
            chosen.append((doc, size))
        elif len(spare) < _SPARE_DOCUMENTS:
            heapq.heappush(spare, (-h, doc, size))
        elif h < -spare[0][0]:
            heapq.heapreplace(spare, (-h, doc, size))
        smallest = min(smallest, (size, doc))

    text_bytes = []
    for source in sources:
        in_doc, read = False, 0
        for _, unit, end in read_units(source):
            text = source.records or bool(unit.strip())
            if text and (source.records or not in_doc):
                close(documents - 1, size)
                documents, size = documents + 1, 0
            in_doc = text
            size += end - read
            read = end
            first_doc_lines += text and documents == 1
        text_bytes.append(read)
    close(documents - 1, size)
    # The size of the corpus is known only now (compressed files, tables): documents too
    # large to hold out are dropped from the choice here.
    total = sum(text_bytes)
    cap = max(2 * fraction * total, 1 << 16)
    heldout = [doc for doc, size in chosen if size <= cap]
    held_bytes = sum(size for _, size in chosen if size <= cap)
    cut = None
    if documents == 1 and not sources[0].records and first_doc_lines >= 2 and fraction > 0:
        tail_start = first_doc_lines - max(1, round(first_doc_lines * 0.01)) + 1
        seen = 0
        for number, unit, _ in read_units(sources[0]):
            seen += bool(unit.strip())
            if seen == tail_start:
                cut = [0, number]
                break
        heldout = [1]
    else:
        if documents >= 2 and held_bytes < fraction * total / 2:
            for _, doc, size in sorted(spare, reverse=True):  # nearest hash first
                if held_bytes >= fraction * total:
                    break
                if size <= cap and held_bytes + size <= 2 * fraction * total:
                    heldout.append(doc)  # never twice the share asked
                    held_bytes += size
            heldout.sort()
        if not heldout and documents >= 2 and fraction > 0:
            heldout = [smallest[1]]
    return {"documents": documents, "heldout": heldout, "cut_line": cut}, text_bytes


def _unit_hash(i: int) -> float:
    """A fixed pseudo-random number in [0, 1) for document i (splitmix64)."""
    z = (i + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


class HeldoutRule:
    """Is each of these document indices one of the held-out documents?"""

    def __init__(self, heldout: list[int]):
        self.heldout = np.asarray(sorted(heldout), dtype=np.int64)

    def __call__(self, doc: np.ndarray) -> np.ndarray:
        return np.isin(np.asarray(doc, dtype=np.int64), self.heldout)


def chunks(sources: list[Source], start: Position, chunk_bytes: int,
           cut_line) -> Iterator[tuple[list[str], list[int], Position]]:
    """Yield (lines, document index of each line, position after the chunk), from `start`."""
    lines: list[str] = []
    docs: list[int] = []
    size = 0
    pos = Position(**vars(start))
    cut = tuple(cut_line) if cut_line else None
    for index in range(start.file, len(sources)):
        source = sources[index]
        if index != pos.file:
            pos = Position(file=index, doc=pos.doc)
        for number, text, end in read_units(source, (pos.line, pos.offset)):
            size += end - pos.offset
            pos.line, pos.offset = number, end
            if source.records:
                pos.doc += 1
                for paragraph in text.split("\n"):
                    if paragraph := paragraph.strip():
                        lines.append(paragraph)
                        docs.append(pos.doc)
            else:
                line = text.strip()
                if not line:
                    pos.in_doc = False
                    continue
                if not pos.in_doc or (index, pos.line) == cut:
                    pos.doc += 1
                pos.in_doc = True
                lines.append(line)
                docs.append(pos.doc)
            if size >= chunk_bytes:
                yield lines, docs, Position(**vars(pos))
                lines, docs, size = [], [], 0
        pos.in_doc = False
    if lines or size:
        yield lines, docs, Position(file=len(sources), doc=pos.doc)
