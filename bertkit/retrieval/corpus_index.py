"""An index directory of a corpus, and search over it:

    index = build_index("index/", read_passages("corpus.jsonl"), ["out/embed", "out/splade"],
                        bm25=True)
    searcher = Searcher(Index.load("index/"), fusion=ReciprocalRank(),
                        reranker=load_reranker("out/rerank"))
    searcher.search(["how old is the moon"], top_k=10)   # [[Hit(id, score, text), ...]]

The directory holds index.json (what built it: each retriever's kind, model and file, the
corpus' passage count and SHA-256), passages.jsonl (ids and texts, for the hits), and each
retriever's data (`bertkit.retrieval.retrievers`). A query goes to every retriever; several
rankings are fused (`bertkit.retrieval.fusion`), then the top few reranked
(`bertkit.retrieval.reranking`), as `bertkit evaluate` does on a BEIR directory.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from bertkit.files import UserError, atomic_dir, read_json, read_jsonl
from bertkit.retrieval.beir import Passages
from bertkit.retrieval.fusion import Fusion, fuse
from bertkit.retrieval.reranking import RERANK_TOP, rerank
from bertkit.retrieval.retrievers import Bm25Retriever, Retriever, load_retriever, open_model

INDEX_FILE = "index.json"
PASSAGES_FILE = "passages.jsonl"
INDEX_FORMAT = "bertkit-index"
"""index.json's "format": what the file is."""
INDEX_VERSION = 1
FUSION_CANDIDATES = 100
"""Passages each retriever hands a fusion per query (at least): a passage second in one
ranking and 30th in another must be there to be counted twice."""


def corpus_hash(passages: Passages) -> str:
    """SHA-256 of the passages' ids and texts, in order."""
    digest = hashlib.sha256()
    for pid, text in zip(passages.ids, passages.texts):
        digest.update(pid.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


@dataclass
class Index:
    """A corpus' passages and the retrievers over them."""
    ids: list[str]
    texts: list[str]
    retrievers: list[Retriever]
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> "Index":
        """The index of a directory `build_index` (`bertkit index`) wrote, each retriever's
        model loaded to encode queries."""
        path = Path(path)
        if not (path / INDEX_FILE).is_file():
            raise UserError(f"{path}: not an index directory (no {INDEX_FILE}; `bertkit index` "
                            f"writes one)")
        meta = read_json(path / INDEX_FILE, "index file", format=INDEX_FORMAT)
        if meta.get("version") != INDEX_VERSION:
            raise UserError(f"{path / INDEX_FILE}: version {meta.get('version')}, this bertkit "
                            f"reads version {INDEX_VERSION}: build the index again")
        ids, texts = [], []
        for _, record in read_jsonl(path / PASSAGES_FILE, "index passages"):
            ids.append(str(record.get("_id")))
            texts.append(str(record.get("text")))
        if len(ids) != meta.get("passages"):
            raise UserError(f"{path / PASSAGES_FILE}: {len(ids)} passages, {INDEX_FILE} says "
                            f"{meta.get('passages')}: build the index again")
        entries = meta.get("retrievers") or []
        for entry in entries:
            if not (path / str(entry.get("file"))).exists():
                raise UserError(f"{path}: {entry.get('file')} is missing: build the index "
                                f"again")
        return cls(ids, texts, [load_retriever(path, e, len(ids), device) for e in entries],
                   path)

    def describe(self) -> list[str]:
        """A line per retriever: its kind and model."""
        return [f"{r.kind}" + (f" ({r.model})" if r.model else "") for r in self.retrievers]


def build_index(out: str | Path, passages: Passages, models: Sequence[str | Path] = (),
                bm25: bool = False, *, device: str | torch.device = "cpu",
                batch_size: int = 64, max_terms: int | None = None,
                precision: str = "fp32", progress: bool = True) -> Index:
    """Index `passages` by each model (a sentence model: dense; a SPLADE model: sparse, each
    vector cut to its heaviest `max_terms` terms when given), run in `precision` (fp32, or
    bf16 autocast), and BM25, written into the directory `out` whole or not at all."""
    if not models and not bm25:
        raise UserError("give a model to index with (--model), --bm25, or both")
    # a directory by its absolute path: `search` may run from another folder
    retrievers: list[Retriever] = [open_model(Path(m).resolve() if Path(m).exists() else m,
                                              device, precision, max_terms=max_terms)
                                   for m in models]
    if bm25:
        retrievers.append(Bm25Retriever())
    for r in retrievers:
        r.index(passages.texts, batch_size=batch_size, progress=progress)
    with atomic_dir(out) as tmp:
        entries = [r.save(tmp, f"{r.kind}-{i}") for i, r in enumerate(retrievers)]
        with open(tmp / PASSAGES_FILE, "w", encoding="utf-8") as f:
            for pid, text in zip(passages.ids, passages.texts):
                f.write(json.dumps({"_id": pid, "text": text}, ensure_ascii=False) + "\n")
        meta = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "passages": len(passages.ids),
                "corpus_sha256": corpus_hash(passages), "retrievers": entries}
        (tmp / INDEX_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return Index(list(passages.ids), list(passages.texts), retrievers, Path(out))


def first_stage(retrievers: Sequence[Retriever], queries: Sequence[str], depth: int,
                fusion: Fusion | None, *, done=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's top `depth` (scores, indices): one retriever's, or several fused (each
    retriever's own top `depth`, at least `FUSION_CANDIDATES`)."""
    if len(retrievers) > 1 and fusion is None:
        raise UserError("several retrievers need a --fusion (rrf or sum)")
    if fusion is None:
        return retrievers[0].top_k(queries, depth, done=done)
    wide = max(depth, FUSION_CANDIDATES)
    return fuse([r.top_k(queries, wide, done=done) for r in retrievers], fusion, depth)


@dataclass
class Hit:
    """One passage found for a query."""
    id: str
    score: float
    text: str


class Searcher:
    """Queries against an index: every retriever, fused, the top `rerank_top` reranked."""

    def __init__(self, index: Index, fusion: Fusion | None = None, reranker=None,
                 rerank_top: int = RERANK_TOP):
        if len(index.retrievers) > 1 and fusion is None:
            raise UserError(f"{index.path}: the index holds {len(index.retrievers)} retrievers: "
                            f"give --fusion (rrf or sum) to combine them")
        if len(index.retrievers) < 2 and fusion is not None:
            raise UserError(f"{index.path}: --fusion fuses several retrievers; the index holds "
                            f"one ({', '.join(index.describe())})")
        self.index, self.fusion = index, fusion
        self.reranker, self.rerank_top = reranker, rerank_top

    def search(self, queries: Sequence[str], top_k: int = 10) -> list[list[Hit]]:
        """Each query's best `top_k` passages, best first."""
        depth = max(top_k, self.rerank_top if self.reranker is not None else 0)
        with torch.inference_mode():
            scores, indices = first_stage(self.index.retrievers, queries, depth, self.fusion)
            if self.reranker is not None:
                scores, indices = rerank(self.reranker, queries, self.index.texts, scores,
                                         indices, self.rerank_top)
        return [[Hit(self.index.ids[i], float(s), self.index.texts[i])
                 for s, i in zip(row_s[:top_k].tolist(), row_i[:top_k].tolist()) if i >= 0]
                for row_s, row_i in zip(scores, indices)]


__all__ = ["FUSION_CANDIDATES", "Hit", "INDEX_FILE", "Index", "PASSAGES_FILE", "Searcher", "build_index",
           "corpus_hash", "first_stage"]
