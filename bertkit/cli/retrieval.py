"""`bertkit mine`: hard negatives for training pairs (`bertkit.retrieval.mining`). Its settings
are the library's MiningSettings and MiningEncoder; the files it reads and writes, and what it
prints, are here. (`bertkit evaluate` on a BEIR directory is in `cli/finetuning.py`, beside the
other kinds of input evaluate takes.)"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.cli.options import Command


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

    settings.check(encoder.model is not None)  # before anything is read or loaded
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
)
