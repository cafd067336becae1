"""SPLADE encoding speed: bertkit's SparseEncoder against sentence-transformers' SparseEncoder,
side by side on the same directory, the same passages and the same batch size, in one process,
runs interleaved so that load from other processes hits both alike.

This is the cost of `bertkit index` with a sparse model (and of `embed` with one): every token
of a passage is projected onto the whole vocabulary, so the masked-LM head's product, not the
encoder, is most of the work. For each precision (fp32; bf16: bertkit under bf16 autocast as
`--precision bf16` runs it, sentence-transformers cast to bf16, its own way): passages/s min /
median / max over the repeats, the ratio of medians to sentence-transformers in the same
precision, the largest difference from sentence-transformers' fp32 vectors and the mean
non-zero entries.

The passages are the first --passages paragraphs of ten words or more of the shared English
books (as bench/search_latency.py indexes them); the model is --model, else all-MiniLM-L6-v2
with the masked-LM head `finetune sparse` starts from (the cost of a forward pass does not
depend on what the weights learned).

    .venv/bin/python bench/sparse_speed.py [--model DIR] [--passages 2000] [--repeats 3]
        [--batch-size 32] [--precision fp32 bf16]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_latency import BOOKS, paragraphs, untrained_sparse  # noqa: E402
from bertkit.runtime import describe  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="a SPLADE directory (default: all-MiniLM-L6-v2 with a fresh head)")
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"],
                        choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    if not BOOKS.is_file():
        print(f"skipped: no {BOOKS}")
        return 0
    try:
        import sentence_transformers
    except ImportError as e:
        print(f"skipped: {e} (pip install -e '.[test]')")
        return 0
    from bertkit.embeddings.sparse_encoder import SparseEncoder

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        model = args.model or untrained_sparse(Path(work) / "splade")
        texts = paragraphs(args.passages, 0)[0].texts
        print(f"{describe()}; sentence-transformers {sentence_transformers.__version__}")
        probe = SparseEncoder.load(model)
        lengths = [min(len(e.ids), probe.max_seq_length)
                   for e in probe.tokenizer.encode_batch(texts, None, with_offsets=False)]
        print(f"{len(texts)} paragraphs of {BOOKS.name}: {np.mean(lengths):.1f} tokens on "
              f"average (cut at {probe.max_seq_length}), batch size {args.batch_size}, "
              f"model {model}")
        reference = None
        for precision in args.precision:
            ours = SparseEncoder.load(model, precision=precision)
            theirs = sentence_transformers.SparseEncoder(str(model), device="cpu")
            if precision == "bf16":
                theirs = theirs.to(torch.bfloat16)
            runs = {
                "sentence-transformers": lambda batch: theirs.encode(
                    batch, batch_size=args.batch_size, convert_to_tensor=True,
                    convert_to_sparse_tensor=False).float().cpu(),
                "bertkit": lambda batch: ours.encode(
                    batch, batch_size=args.batch_size, convert_to_sparse_tensor=False),
            }
            rates: dict[str, list[float]] = {name: [] for name in runs}
            outputs: dict[str, torch.Tensor] = {}
            with warnings.catch_warnings():  # passages cut to the model's length, each call
                warnings.simplefilter("ignore")
                for run in runs.values():  # warm up
                    run(texts[:4 * args.batch_size])
                for _ in range(args.repeats):
                    for name, run in runs.items():
                        start = time.perf_counter()
                        outputs[name] = run(texts)
                        rates[name].append(len(texts) / (time.perf_counter() - start))
            if reference is None:
                reference = outputs["sentence-transformers"]
            base = statistics.median(rates["sentence-transformers"])
            print(f"\n{precision} (load average "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}):")
            for name, r in rates.items():
                diff = float((outputs[name] - reference).abs().max())
                active = float((outputs[name] != 0).sum(1).float().mean())
                print(f"  {name:22s} passages/s  min {min(r):6.1f}  median "
                      f"{statistics.median(r):6.1f}  max {max(r):6.1f}  ratio "
                      f"{statistics.median(r) / base:5.2f}x  max|diff| {diff:.1e}  "
                      f"non-zero {active:.0f}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
