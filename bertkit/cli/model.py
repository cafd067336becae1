"""Commands on a model directory: `init` (a fresh model sized to a tokenizer), `info`,
`fill-mask`, `next-sentence` (a next-sentence head asked about two sentences), `detect`
(an ELECTRA discriminator's replaced tokens) and `generate` (text from a left-to-right
model)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.cli.options import Command
from bertkit.cli.text import text_batches
from bertkit.files import UserError


def run_init(opts) -> int:
    from bertkit.model.encoder import num_parameters

    model = opts.create()
    c = model.config
    print(f"{opts.out}: {opts.preset} model, {c.architecture} (L{c.num_layers}/H{c.hidden_size}/"
          f"A{c.num_heads}/I{c.intermediate_size}), {num_parameters(model):,} parameters, "
          f"vocabulary {c.vocab_size:,}, seed {opts.seed}")
    return 0


@dataclass(kw_only=True)
class InfoOptions:
    model: Path = field(metadata={"model": True})
    """Model directory (bertkit or Hugging Face)."""
    json: bool = False
    """One JSON object instead of the table."""


def run_info(opts: InfoOptions) -> int:
    from bertkit.model.info import info

    result = info(opts.model)
    print(json.dumps(result.to_dict(), indent=2) if opts.json else result.format())
    return 0


@dataclass(kw_only=True)
class FillMaskOptions:
    model: Path = field(metadata={"model": True})
    """Model directory with a masked-language-model (MLM) head."""
    text: list[str] = field(default_factory=list, metadata={"positional": True})
    """Texts with one or more [MASK]."""
    input: Path | None = None
    """A file instead: one text per line, or JSON lines, CSV, TSV, Parquet or Arrow, one text
    per record (its --text-field); a folder, glob or `datasets` directory of them; "-":
    standard input."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    top_k: int = 5
    """Guesses per [MASK]."""
    json: bool = False
    """One {"text", "masks": [[{"score", "token", "token_str", "sequence"}, ...], ...]} per
    text, each guess in the shape of transformers' fill-mask pipeline ("token" is the id)."""
    batch_size: int = 32
    """Texts per forward pass."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    allow_untrained_head: bool = False
    """Guess even with a masked-LM head the checkpoint lacks (initialised at random: noise)."""


def _untrained_mlm_head(model: Path) -> list[str]:
    """The masked-LM head weights the directory lacks; [] also when it is no model directory
    (loading it then says what is wrong)."""
    from bertkit.model.info import info

    try:
        return [name for name in info(model).missing if name.startswith("mlm.")]
    except UserError:
        return []


def run_fill_mask(opts: FillMaskOptions) -> int:
    from bertkit.model.fill_mask import FillMask
    from bertkit.model.hub import GENERATOR_DIR

    if FillMask.uses_generator(opts.model):  # the discriminator has no masked-LM head
        print(f"note: {opts.model} is an ELECTRA discriminator; fill-mask guesses with its "
              f"generator ({opts.model / GENERATOR_DIR})", file=sys.stderr)
    elif not opts.allow_untrained_head and (untrained := _untrained_mlm_head(opts.model)):
        raise UserError(f"{opts.model} has no trained masked-LM head (no {', '.join(untrained)}"
                        f" in its weights); fill-mask needs one (--allow-untrained-head "
                        f"guesses with a random one)")
    filler = FillMask.load(opts.model, device=opts.device, batch_size=opts.batch_size)
    for names, texts, _ in text_batches(opts.text, opts.input, size=256, pairs=False,
                                        text_field=opts.text_field):
        for result in filler(texts, top_k=opts.top_k, names=names):
            if opts.json:
                print(json.dumps(result, ensure_ascii=False))
                continue
            print(result["text"])
            for k, guesses in enumerate(result["masks"], 1):
                cells = "  ".join(f"{g['token_str']:<12} {g['score']:.4f}" for g in guesses)
                print(f"  [MASK] {k}:  {cells}")
    return 0


@dataclass(kw_only=True)
class NextSentenceOptions:
    model: Path = field(metadata={"model": True})
    """Model directory pretrained with next-sentence prediction (--objective mlm+nsp)."""
    first: str
    """Sentence A."""
    second: str
    """Sentence B: is it A's continuation, or a random sentence?"""
    json: bool = False
    """One {"first", "second", "is_next"} object."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""


def run_next_sentence(opts: NextSentenceOptions) -> int:
    from bertkit.model.next_sentence import NextSentence

    is_next = NextSentence.load(opts.model, device=opts.device)(opts.first, opts.second)
    if opts.json:
        print(json.dumps({"first": opts.first, "second": opts.second, "is_next": is_next},
                         ensure_ascii=False))
    else:
        print(f"P(B follows A) = {is_next:.4f}")
    return 0


@dataclass(kw_only=True)
class DetectOptions:
    model: Path = field(metadata={"model": True})
    """ELECTRA directory (pretrained with --objective electra)."""
    text: list[str] = field(metadata={"positional": True})
    """Texts to judge."""
    json: bool = False
    """One {"text", "tokens": [{"token", "start", "end", "replaced"}, ...]} per text."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""


def run_detect(opts: DetectOptions) -> int:
    from bertkit.model.detect import ReplacedTokens

    detect = ReplacedTokens.load(opts.model, device=opts.device)
    for text, tokens in zip(opts.text, detect.batch(opts.text)):
        if opts.json:
            print(json.dumps({"text": text, "tokens": tokens}, ensure_ascii=False))
            continue
        print(text)
        print("  " + "  ".join(f"{t['token']} {t['replaced']:.2f}" for t in tokens))
    return 0


def run_generate(opts) -> int:
    from bertkit.model.generate import generate

    texts = generate(opts.model, opts.prompt, opts.generation, device=opts.device)
    if opts.json:
        print(json.dumps({"prompt": opts.prompt, "texts": texts}, ensure_ascii=False))
        return 0
    for i, text in enumerate(texts, 1):
        print(text if len(texts) == 1 else f"[{i}] {text}")
    return 0


COMMANDS = (
    Command("info", run_info, (InfoOptions,),
            help="a model's config and parameter counts per part"),
    Command("init", run_init, ("bertkit.model.create:InitOptions",),
            help="a randomly initialised model sized to a tokenizer"),
    Command("fill-mask", run_fill_mask, (FillMaskOptions,),
            help="the model's top-k guesses for each [MASK]"),
    Command("next-sentence", run_next_sentence, (NextSentenceOptions,),
            help="whether sentence B follows sentence A, by a model's next-sentence head",
            description="The probability a model pretrained with next-sentence prediction "
                        "(--objective mlm+nsp) gives to B being A's continuation rather than "
                        "a random sentence."),
    Command("detect", run_detect, (DetectOptions,),
            help="which tokens of a text an ELECTRA discriminator judges replaced",
            description="Per token, the probability that an ELECTRA discriminator "
                        "(--objective electra) gives to its having been replaced."),
    Command("generate", run_generate, ("bertkit.model.generate:GenerateOptions",),
            help="continue a prompt with a model pretrained with --objective clm",
            description="Left to right, one piece at a time: greedy, or sampled with a "
                        "temperature, top-k and top-p, from a seeded generator; stops at "
                        "[SEP] or after --max-new-tokens."),
)
