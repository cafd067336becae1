"""`bertkit mine`: hard negatives for training pairs (`bertkit.retrieval.mining`), and
`bertkit index` / `bertkit search`: a corpus indexed, then searched (`bertkit.retrieval.corpus_index`).
Mine's settings are the library's MiningSettings and MiningEncoder; the files each command reads
and writes, and what it prints, are here. (`bertkit evaluate` on a BEIR directory is in
`cli/finetuning.py`, beside the other kinds of input evaluate takes.)"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bertkit.cli.options import Command
from bertkit.files import UserError


@dataclass(kw_only=True)
class MineFiles:
    input: Path
    """Training pairs as `finetune embed` reads them: JSON lines, CSV or TSV with anchor (or
    query) and positive (triplets: their negative is replaced), or query and relevant."""
    passages: Path | None = None
    """Where negatives are looked for: a text file, one passage a line, or JSON lines with
    text (and _id, title: a BEIR corpus.jsonl); none: the positives of --input."""
    out: Path
    """Output JSON lines: anchor, positive, negative, a row per negative (the triplets
    `finetune embed` trains on)."""
    quiet: bool = False
    """No progress on stderr."""


def run_mine(files: MineFiles, settings, encoder) -> int:
    from bertkit.retrieval.mining import collection, mine, read_training_pairs, write_triplets
    from bertkit.runtime import bound_kernel_cache

    settings.check(encoder.model is not None)  # before anything is read or loaded
    bound_kernel_cache()
    pairs = read_training_pairs(files.input)
    passages = collection(pairs, files.passages)
    embedder = encoder.load() if encoder.model is not None else None
    negatives = mine(pairs, passages, settings, embedder, progress=not files.quiet)
    rows = write_triplets(files.out, pairs, negatives, passages)
    short = sum(len(n) < settings.num_negatives for n in negatives)
    print(f"{files.out}: {rows} triplets for {len(pairs)} pairs from {len(passages)} passages"
          + (f" ({short} pairs with fewer than {settings.num_negatives} negatives)"
             if short else ""))
    return 0


@dataclass(kw_only=True)
class IndexOptions:
    input: Path
    """The corpus: JSON lines with text (and _id, title: a BEIR corpus.jsonl), or a text file,
    one passage a line (its id its line number)."""
    model: list[Path] = field(default_factory=list, metadata={"model": True})
    """Model to index with, repeatable: a sentence model (dense vectors, exact cosine search)
    or a sparse encoder from `finetune sparse` (an inverted index)."""
    bm25: bool = False
    """Also index by BM25 (bm25s)."""
    max_terms: int | None = None
    """A sparse encoder's vectors (of passages, and of queries at search) keep their heaviest
    this many terms; none: every non-zero one."""
    out: Path = field(metadata={"output": "directory"})
    """Directory for the index (index.json says what built it)."""
    batch_size: int = 64
    """Texts per forward pass."""
    device: str = "auto"
    """Where the models run: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """The models' passages in fp32 (exact) or under bf16 autocast (faster on CPUs with
    AVX512-BF16 or AMX and on GPUs since Ampere); auto: bf16 on a GPU that runs it natively,
    else fp32."""
    quiet: bool = False
    """No progress on stderr."""


def run_index(opts: IndexOptions) -> int:
    from bertkit.retrieval.beir import read_passages
    from bertkit.retrieval.corpus_index import build_index
    from bertkit.runtime import bound_kernel_cache, resolve_device, warned_precision

    if not opts.model and not opts.bm25:
        raise UserError("give a model to index with (--model), --bm25, or both")
    if opts.max_terms is not None and opts.max_terms < 1:
        raise UserError(f"--max-terms must be at least 1, got {opts.max_terms}")
    passages = read_passages(opts.input)  # bad lines named before any model loads
    bound_kernel_cache()
    device = resolve_device(opts.device)
    precision = warned_precision(opts.precision, device) if opts.model else "fp32"
    index = build_index(opts.out, passages, opts.model, opts.bm25, device=device,
                        batch_size=opts.batch_size, max_terms=opts.max_terms,
                        precision=precision, progress=not opts.quiet)
    print(f"{opts.out}: {len(passages.ids)} passages by {', '.join(index.describe())}")
    return 0


@dataclass(kw_only=True)
class SearchOptions:
    index: Path
    """Index directory written by `bertkit index`."""
    query: list[str] = field(default_factory=list)
    """A query, repeatable."""
    input: Path | None = None
    """Text file of queries, one a line."""
    top_k: int = 10
    """Passages shown per query."""
    fusion: Literal["rrf", "sum"] | None = None
    """How an index of several retrievers combines them: rrf (reciprocal-rank fusion, k 60) or
    sum (a weighted sum of min-max normalised scores); none: the index has one."""
    weights: list[float] | None = None
    """With --fusion sum: a weight per retriever, in the order of the index (its models, then
    BM25); none: 1 each."""
    rerank: Path | None = field(default=None, metadata={"model": True})
    """Reranker from `finetune rerank`: reorders each query's first --rerank-top passages."""
    rerank_top: int = 20
    """Passages reranked per query."""
    out: Path | None = None
    """Output JSON lines, one per query: query, ids, scores, texts; none: a table on stdout."""
    batch_size: int = 64
    """Pairs per forward pass of the reranker."""
    device: str = "auto"
    """Where the models run: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """The reranker's: fp32 (exact) or bf16 autocast (about 2x faster on CPUs with
    AVX512-BF16 or AMX); auto: bf16 on a GPU that runs it natively, else fp32. Queries are
    encoded as the index's passages were, in fp32."""
    quiet: bool = False
    """No progress on stderr."""

    def __post_init__(self) -> None:
        for name in ("top_k", "rerank_top", "batch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got "
                                f"{getattr(self, name)}")


def _queries(opts: SearchOptions) -> list[str]:
    from bertkit.files import read_lines, require_file

    found = list(opts.query)
    if opts.input is not None:
        found += [line.strip() for _, line in read_lines(require_file(opts.input))
                  if line.strip()]
    if not found:
        raise UserError("give a query (--query TEXT) or a file of them (--input)")
    return found


def _show(query: str, hits) -> None:
    print(f"query: {query}")
    for rank, hit in enumerate(hits, 1):
        text = hit.text if len(hit.text) <= 100 else hit.text[:97] + "..."
        print(f"{rank:>4}  {hit.score:>9.4f}  {hit.id:<12}  {text}")
    print()


def run_search(opts: SearchOptions) -> int:
    from bertkit.files import atomic_file
    from bertkit.retrieval.fusion import fusion_named
    from bertkit.retrieval.corpus_index import Index, Searcher
    from bertkit.retrieval.reranking import load_reranker
    from bertkit.runtime import resolve_device, warned_precision

    queries = _queries(opts)
    if opts.weights is not None and opts.fusion is None:
        raise UserError("--weights are the weighted sum's: give --fusion sum")
    device = resolve_device(opts.device)
    index = Index.load(opts.index, device)
    fusion = None if opts.fusion is None else fusion_named(opts.fusion, opts.weights,
                                                          len(index.retrievers))
    reranker = None
    if opts.rerank is not None:
        reranker = load_reranker(opts.rerank, device, opts.batch_size,
                                 precision=warned_precision(opts.precision, device))
    found = Searcher(index, fusion, reranker, opts.rerank_top).search(queries, opts.top_k)
    if opts.out is None:
        for query, hits in zip(queries, found):
            _show(query, hits)
        return 0
    with atomic_file(opts.out) as f:
        for query, hits in zip(queries, found):
            f.write(json.dumps({"query": query, "ids": [h.id for h in hits],
                                "scores": [h.score for h in hits],
                                "texts": [h.text for h in hits]}, ensure_ascii=False) + "\n")
    print(f"{opts.out}: {len(queries)} queries, top {opts.top_k} each", file=sys.stderr)
    return 0


COMMANDS = (
    Command("mine", run_mine, (MineFiles, "bertkit.retrieval.mining:MiningSettings",
                               "bertkit.retrieval.mining:MiningEncoder"),
            help="hard negatives for training pairs, by a sentence model and/or BM25",
            description="For each (anchor, positive) pair of --input, the passages of "
                        "--passages (else the positives themselves) that a sentence model "
                        "(--model) and/or BM25 (--bm25) ranks highest for the anchor, its "
                        "positives left out, filtered by --margin and --max-score, the first "
                        "--range-min skipped: --num-negatives of them, written as triplets "
                        "(anchor, positive, negative) that `finetune embed` trains on."),
    Command("index", run_index, (IndexOptions,),
            help="index a corpus for search: dense, sparse and BM25",
            description="Encode the passages of --input by each --model (a sentence model: "
                        "dense vectors searched exactly by cosine; a sparse encoder from "
                        "`finetune sparse`: an inverted index of its vectors) and/or index "
                        "them by BM25 (--bm25), into the directory --out that `bertkit "
                        "search` and `bertkit serve --index` read."),
    Command("search", run_search, (SearchOptions,),
            help="search an index: fused retrievers, the top passages reranked",
            description="The best --top-k passages of an index (`bertkit index`) for each "
                        "query: its retrievers' rankings, fused by --fusion when it holds "
                        "several, then the first --rerank-top reordered by a reranker "
                        "(--rerank). A table on stdout, or JSON lines in --out."),
)

