"""Hard negatives for training pairs: for each (query, positive), passages of a collection that
a retriever ranks high for the query but that are not its positives, written as triplets that
`bertkit finetune embed` trains on (`anchor`, `positive`, `negative`: one row per negative).

The candidates of a query are the top `range_max` passages of each retriever, the query's own
text and its positives left out (ranks are counted without them): a sentence model's cosines,
found exactly in bounded memory (`bertkit.retrieval.search`), and/or BM25 (bm25s). For each
pair, in each retriever's list:

1. a candidate scored above `max_score`, or within `margin` of the positive's score (`score +
   margin > positive score`: likely a false negative) is dropped (cosines of the model: BM25's
   candidates are scored by the model too when there is one);
2. the first `range_min` of those left are skipped;
3. the next `num_negatives` are kept.

With both retrievers the two lists are taken alternately (the model's first), a passage found
by both once, up to `num_negatives`. This is sentence-transformers' `mine_hard_negatives` with
its "top" sampling and "triplet" output, whose option names these are; a pair left with no
negative is left out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from bertkit.embeddings.embedder import EncoderOptions
from bertkit.files import UserError, atomic_file
from bertkit.finetuning import sentence_pairs as sp
from bertkit.progress import Progress
from bertkit.retrieval.beir import read_passages
from bertkit.retrieval.bm25 import Bm25
from bertkit.retrieval.search import (PASSAGE_BLOCK, QUERY_BLOCK, encode, excluded_rows,
                                      leave_out, top_k)


@dataclass(kw_only=True)
class MiningEncoder(EncoderOptions):
    """The sentence model whose cosines rank the candidates, if any."""

    model: Path | None = None
    """Sentence model (bertkit, Hugging Face or sentence-transformers directory, or a model's
    name in the local Hugging Face cache); none: BM25 alone (--bm25)."""


@dataclass(kw_only=True)
class MiningSettings:
    """Which candidates become negatives (sentence-transformers' `mine_hard_negatives` names)."""

    num_negatives: int = 3
    """Negatives kept per pair (one output row each)."""
    range_min: int = 0
    """Skip this many of the best candidates left after filtering (the closest are the most
    likely to be unlabelled positives)."""
    range_max: int = 50
    """Candidates per query from each retriever: its top passages, positives left out."""
    margin: float | None = None
    """Drop a candidate whose cosine plus this is above the positive's (needs --model)."""
    max_score: float | None = None
    """Drop a candidate whose cosine is above this (needs --model)."""
    bm25: bool = False
    """Also take candidates from BM25 (bm25s); alone without --model."""
    batch_size: int = 32
    """Texts per forward pass of the model. On paragraphs of a few hundred tokens, 32 is
    faster on a CPU than 64, and the passes' buffers (two in flight) weigh half as much."""
    query_block: int = QUERY_BLOCK
    """Queries scored at once against a block of passages (memory: query block x passage
    block scores)."""
    passage_block: int = PASSAGE_BLOCK
    """Passages scored at once."""

    def __post_init__(self) -> None:
        for name in ("num_negatives", "range_max", "batch_size", "query_block", "passage_block"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got "
                                f"{getattr(self, name)}")
        if not 0 <= self.range_min < self.range_max:
            raise UserError(f"--range-min {self.range_min} must be at least 0 and below "
                            f"--range-max {self.range_max}")

    def check(self, model: bool) -> None:
        """A UserError when these settings cannot run with a model (or without one)."""
        if not model and not self.bm25:
            raise UserError("give --model (a sentence model), --bm25, or both")
        if not model and (self.margin is not None or self.max_score is not None):
            raise UserError("--margin and --max-score compare the model's cosines: give "
                            "--model")


@dataclass
class Candidates:
    """One retriever's candidates, a row per query: passage positions (-1: none) and scores."""
    indices: torch.Tensor
    scores: torch.Tensor


def read_training_pairs(path: str | Path) -> list[sp.Pair]:
    """The (anchor, positive) pairs of a file `finetune embed` reads: pairs, triplets (their
    negative dropped) or queries (each relevant passage a pair)."""
    kind = sp.detect_kind(path)
    if kind == "pairs":
        return sp.read_pairs(path)
    if kind == "triplets":
        return [sp.Pair(t.anchor, t.positive, t.source) for t in sp.read_triplets(path)]
    if kind == "queries":
        return [sp.Pair(q.query, r, q.source) for q in sp.read_queries(path) for r in q.relevant]
    raise UserError(f"{path}: mine reads pairs (anchor or query, positive), triplets (anchor, "
                    f"positive, negative) or queries (query, relevant); this file holds {kind}")


def _left_out(queries: list[str], pairs: Sequence[sp.Pair], query_of: list[int],
              passages: Sequence[str]) -> list[set[int]]:
    """Per query, the passages that are never its negatives: its own text and its positives."""
    at = {text: i for i, text in enumerate(passages)}
    out = [{at[q]} if q in at else set() for q in queries]
    for pair, q in zip(pairs, query_of):
        if pair.positive in at:
            out[q].add(at[pair.positive])
    return out


def _found(search: Callable[[torch.Tensor, int], tuple], left_out: list[set[int]],
           width: int) -> Candidates:
    """Each query's first `width` passages that it does not leave out, from `search(rows,
    k)`: (scores, indices), each `[len(rows), k]`, of the queries `rows`, best first.

    A query must be searched `width` plus its left-out passages deep. The queries go in
    groups by that count rounded up to a power of two, each group searched as deep as it
    needs: one query with hundreds of positives (a first sentence such as "Mr") would
    otherwise make every query's search, and what it holds, that deep."""
    counts = torch.tensor([len(found) for found in left_out])
    groups = torch.where(counts > 1, 2 ** torch.log2(counts.clamp(min=1)).ceil(), counts).long()
    indices = torch.full((len(left_out), width), -1, dtype=torch.long)
    scores = torch.full((len(left_out), width), -torch.inf)
    for group in groups.unique().tolist():
        rows = (groups == group).nonzero().squeeze(1)
        top, where = search(rows, width + group)
        kept = leave_out(torch.as_tensor(where), torch.as_tensor(top).float(),
                         excluded_rows([left_out[r] for r in rows.tolist()]), width)
        indices[rows], scores[rows] = kept
    return Candidates(indices, scores)


def choose(candidates: Candidates, positive: torch.Tensor | None,
           settings: MiningSettings) -> torch.Tensor:
    """`[P, R]` true where a pair's candidate is kept: not dropped by `max_score` or `margin`
    (against the pair's `positive` score), past the first `range_min` left, within
    `num_negatives` (the rows are the pairs' queries' candidates)."""
    ok = candidates.indices >= 0
    if settings.margin is not None:
        ok &= candidates.scores + settings.margin <= positive[:, None]
    if settings.max_score is not None:
        ok &= candidates.scores <= settings.max_score
    place = ok.cumsum(1)
    return ok & (place > settings.range_min) & (place <= settings.range_min
                                                 + settings.num_negatives)


def merge(lists: Sequence[Sequence[int]], n: int) -> list[int]:
    """The lists taken alternately, the first list first, each item once, up to `n` items."""
    out: list[int] = []
    for k in range(max(map(len, lists), default=0)):
        for items in lists:
            if k < len(items) and items[k] not in out:
                out.append(items[k])
    return out[:n]


def collection(pairs: Sequence[sp.Pair], path: str | Path | None = None) -> list[str]:
    """The passages negatives are looked for in: those of `path` (`read_passages`), else the
    pairs' positives; each distinct text once, in the order first seen."""
    if path is None:
        return list(dict.fromkeys(p.positive for p in pairs))
    return list(dict.fromkeys(read_passages(path).texts))


def _dots(a: torch.Tensor, a_rows: torch.Tensor, b: torch.Tensor, b_rows: torch.Tensor,
          block: int = 8192) -> torch.Tensor:
    """`a[a_rows[i]] . b[b_rows[i]]` for each i, a block at a time (the gathered rows of a
    block, not of all, are held)."""
    out = torch.empty(len(a_rows), dtype=a.dtype)
    for start in range(0, len(a_rows), block):
        end = start + block
        out[start:end] = (a[a_rows[start:end]] * b[b_rows[start:end]]).sum(1)
    return out


def _vectors(embedder, texts: Sequence[str], settings: MiningSettings, progress: bool,
             what: str) -> torch.Tensor:
    return encode(embedder, texts, batch_size=settings.batch_size, progress=progress, what=what)


def _positive_scores(embedder, pairs: Sequence[sp.Pair], query_of: torch.Tensor,
                     queries: torch.Tensor, passages: torch.Tensor, texts: Sequence[str],
                     settings: MiningSettings, progress: bool) -> torch.Tensor:
    """Each pair's cosine of query and positive (a positive not among the passages encoded)."""
    at = {text: i for i, text in enumerate(texts)}
    missing = list(dict.fromkeys(p.positive for p in pairs if p.positive not in at))
    if missing:
        passages = torch.cat([passages, _vectors(embedder, missing, settings, progress,
                                                  "positives")])
        at.update({text: len(texts) + i for i, text in enumerate(missing)})
    rows = torch.tensor([at[p.positive] for p in pairs])
    return _dots(queries, query_of, passages, rows)


def _rescored(candidates: Candidates, queries: torch.Tensor,
              passages: torch.Tensor) -> Candidates:
    """The candidates with the model's cosines as their scores (-inf where there is none)."""
    width = candidates.indices.shape[1]
    rows = torch.arange(len(queries)).repeat_interleave(width)
    found = candidates.indices.flatten()
    scores = _dots(queries, rows, passages, found.clamp(min=0)).view(-1, width)
    return Candidates(candidates.indices, scores.masked_fill(candidates.indices < 0, -np.inf))


def _searched(what: str, count: int, progress: bool, search) -> Candidates:
    bar = Progress(what, count, "queries", enabled=progress)
    found = search(lambda n: bar.update(add=n))
    bar.finish()
    return found


def mine(pairs: Sequence[sp.Pair], passages: Sequence[str], settings: MiningSettings,
         embedder=None, *, progress: bool = True) -> list[list[int]]:
    """Each pair's negatives, as positions in `passages`, by the rules of this module's
    docstring: from the cosines of `embedder` (anything with sentence-transformers' `encode`)
    and/or BM25 (`settings.bm25`)."""
    if not pairs or not passages:
        raise ValueError("mining needs pairs and passages")
    settings.check(embedder is not None)
    queries = list(dict.fromkeys(p.anchor for p in pairs))
    position = {q: i for i, q in enumerate(queries)}
    query_of = torch.tensor([position[p.anchor] for p in pairs])
    left_out = _left_out(queries, pairs, query_of.tolist(), passages)
    width, lists, positive = settings.range_max, [], None
    if embedder is not None:
        q_vectors = _vectors(embedder, queries, settings, progress, "queries")
        p_vectors = _vectors(embedder, passages, settings, progress, "passages")
        positive = _positive_scores(embedder, pairs, query_of, q_vectors, p_vectors, passages,
                                    settings, progress)
        lists.append(_searched("search", len(queries), progress, lambda done: _found(
            lambda rows, k: top_k(q_vectors, p_vectors, k, rows=rows,
                                  query_block=settings.query_block,
                                  passage_block=settings.passage_block, done=done),
            left_out, width)))
    if settings.bm25:
        index = Bm25(passages)
        found = _searched("bm25", len(queries), progress, lambda done: _found(
            lambda rows, k: index.top_k([queries[r] for r in rows.tolist()], k, done=done),
            left_out, width))
        lists.append(found if embedder is None else _rescored(found, q_vectors, p_vectors))
    chosen = [_kept(found, query_of, positive, settings) for found in lists]
    return [merge([c[p] for c in chosen], settings.num_negatives) for p in range(len(pairs))]


def _kept(found: Candidates, query_of: torch.Tensor, positive: torch.Tensor | None,
          settings: MiningSettings) -> list[list[int]]:
    """Each pair's kept candidates of one retriever, best first. Taken from one flat list,
    not row by row: a tensor per pair would be a hundred thousand small allocations."""
    per_pair = Candidates(found.indices[query_of], found.scores[query_of])
    take = choose(per_pair, positive, settings)
    flat = per_pair.indices[take].tolist()  # row-major: pair by pair, best first
    ends = take.sum(1).cumsum(0).tolist()
    return [flat[start:end] for start, end in zip([0] + ends[:-1], ends)]


def write_triplets(out: str | Path, pairs: Sequence[sp.Pair], negatives: Sequence[list[int]],
                   passages: Sequence[str]) -> int:
    """Write JSON lines `{"anchor", "positive", "negative"}`, a row per pair and negative (a
    pair with none left out); the file appears whole or not at all. Returns the rows."""
    if not any(negatives):
        raise UserError("no pair has a negative left: raise --range-max, lower --range-min "
                        "or --margin, or raise --max-score")
    rows = 0
    with atomic_file(out) as f:
        for pair, found in zip(pairs, negatives):
            for n in found:
                f.write(json.dumps({"anchor": pair.anchor, "positive": pair.positive,
                                    "negative": passages[n]}, ensure_ascii=False) + "\n")
                rows += 1
    return rows


__all__ = ["Candidates", "MiningEncoder", "MiningSettings", "choose", "collection", "merge",
           "mine", "read_training_pairs", "write_triplets"]
