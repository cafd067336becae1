"""The search view of `bertkit serve`: the lines of --input, each model's sentence vectors of
them computed once and kept (an [N, D] float32 matrix of unit rows), and a query's nearest
lines by cosine, which is then one matrix product.

A sentence model (a sentence-transformers directory, such as `bertkit finetune embed` writes)
encodes the lines as its directory says: its pooling, normalisation, maximum length and
lowercasing (`Embedder.encode`, equal to sentence-transformers'). Any other encoder gives the
mean of its last layer's token vectors, a space its training never shaped for similarity:
`vectors_note` says so, and the page shows it.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertkit.embeddings.standardize import unit_rows
from bertkit.files import UserError
from bertkit.text.sources import expand_one, numbered_texts, why_empty


@dataclass
class LineIndex:
    """The lines a query is matched against, and each model's vectors of them."""

    lines: list[str]
    numbers: list[int]
    """Each line's number in the file, from 1 (blank lines are skipped, not renumbered)."""
    source: str
    """The file the lines were read from."""
    more: bool = False
    """The file goes on past the lines read (the limit stopped the reading)."""
    files: list[str] | None = None
    """Each line's file name, when the source is several files (a folder, a glob, a
    `datasets` directory); its number is then the line or row in that file."""
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    """Model name -> [N, D] float32 unit rows, made on the model's first use."""

    @classmethod
    def read(cls, path: str | Path, limit: int, text_field: str = "text") -> "LineIndex":
        """The first `limit` non-blank texts of a file, folder, glob or `datasets` directory,
        with their line (or row) numbers: its lines, or the `text_field` of its records
        (`numbered_texts`)."""
        lines: list[str] = []
        numbers: list[int] = []
        files: list[str] = []
        more = False
        for source, number, line in numbered_texts(path, text_field, "corpus"):
            if not line.strip():
                continue
            if len(lines) == limit:
                more = True
                break
            lines.append(line)
            numbers.append(number)
            files.append("" if source.path == Path(path) else source.path.name)
        if not lines:
            raise UserError(f"{path}: no text ({why_empty(expand_one(path, text_field))})")
        return cls(lines, numbers, str(path), more, files if any(files) else None)

    def describe(self) -> dict:
        return {"source": Path(self.source).name, "lines": len(self.lines), "more": self.more,
                "encoded": list(self.vectors)}

    def encode(self, name: str, embedder, progress: bool = False) -> np.ndarray:
        """`name`'s vectors of every line: computed on first use (tokens/s and ETA in the log
        with `progress`), then kept."""
        if name in self.vectors:
            return self.vectors[name]
        started = time.perf_counter()
        if progress:
            print(f"search: {name}: encoding {len(self.lines):,} lines of "
                  f"{Path(self.source).name}", file=sys.stderr, flush=True)
        vectors = embedder.encode(self.lines, show_progress_bar=progress)
        self.vectors[name] = np.ascontiguousarray(unit_rows(vectors), dtype=np.float32)
        if progress:
            print(f"search: {name}: {len(self.lines):,} vectors of {vectors.shape[1]} in "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        return self.vectors[name]

    def nearest(self, name: str, embedder, query: str, k: int,
                max_chars: int | None = None) -> list[dict]:
        """The k lines nearest to `query` by cosine, best first (ties: the earlier line), each
        as {"line": its number, "text", "cosine"} ("file" first, its file's name, when the
        source is several files); texts cut to `max_chars` for showing."""
        matrix = self.encode(name, embedder)
        q = unit_rows(np.asarray(embedder.encode([query]), dtype=np.float32))[0]
        scores = matrix @ q
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return [{**({"file": self.files[i]} if self.files else {}),
                 "line": self.numbers[i], "text": _cut(self.lines[i], max_chars),
                 "cosine": round(float(scores[i]), 6)} for i in top]


def vectors_note(embedder, sentence: bool) -> str:
    """What a model's sentence vectors are, in words for the page."""
    pool = " + ".join(embedder.pool)
    if sentence:
        return (f"sentence model: its own pooling ({pool}"
                f"{', normalized' if embedder.normalize else ''})")
    return (f"not a sentence model: the {pool} of its last layer's token vectors, which its "
            f"training did not shape for similarity")


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit] + "..."


__all__ = ["LineIndex", "vectors_note"]
