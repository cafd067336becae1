"""Commands on text: `tokenizer train` (a vocabulary from text files) and `tokenize`."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal

from bertkit.cli.options import Command
from bertkit.files import UserError
from bertkit.progress import counted
from bertkit.text.sources import numbered_texts


def run_tokenizer_train(opts) -> int:
    tok = opts.train()
    print(f"{opts.out}: {tok.kind} vocabulary of {tok.vocab_size:,} tokens "
          f"({'cased' if opts.cased else 'uncased'}) from {len(opts.input)} input(s)")
    return 0


@dataclass(kw_only=True)
class TokenizerExtendOptions:
    model: Path = field(metadata={"model": True})
    """Model directory (bertkit or Hugging Face BERT / ModernBERT, with its tokenizer)."""
    input: list[Path]
    """The domain's text, where the words are counted: files, folders, globs (quoted) or
    `datasets` directories, in any format `prepare` reads (plain text, JSONL, CSV, TSV,
    Parquet, Arrow; compressed or not)."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    add: int
    """Words to add: those that save the most pieces, count x (pieces - 1). The characters
    the vocabulary lacks come first, on top of these (see --max-chars); 0: characters
    alone."""
    out: Path = field(metadata={"output": "directory"})
    """Directory for the extended model and tokenizer."""
    min_count: int = 2
    """Only words, and characters, seen at least this many times."""
    max_chars: int | None = None
    """Characters to add at most, the most frequent of those the vocabulary lacks and the
    domain's [UNK]s hold (WordPiece: "c" and "##c" each). Default: all of them; 0: none."""
    quiet: bool = False
    """No progress on stderr."""


def run_tokenizer_extend(opts: TokenizerExtendOptions) -> int:
    from bertkit.model.extend import extend_vocabulary
    from bertkit.text.extend import describe, describe_chars

    result = extend_vocabulary(opts.model, opts.input, opts.add, opts.out,
                               min_count=opts.min_count, max_chars=opts.max_chars,
                               text_field=opts.text_field, progress=not opts.quiet)
    (before, after), (was, now) = result.vocab_size, result.pieces
    pieces = result.tokenizer.vocab_size - result.first_id
    change = f"{abs(100 * (was - now) / max(was, 1)):.1f}% {'fewer' if now <= was else 'more'}"
    chars, words = len(result.chars), len(result.words)
    print(f"{opts.out}: {counted(chars, 'character')} and {counted(words, 'word')} added "
          f"to the {result.tokenizer.kind} vocabulary ({counted(pieces, 'piece')}, ids "
          f"{result.first_id:,}-"
          f"{result.first_id + pieces - 1:,}; model rows {before:,} -> {after:,}); the domain "
          f"text takes {now:,} pieces instead of {was:,} ({change}), {result.unknown[1]:,} of "
          f"them [UNK] instead of {result.unknown[0]:,}")
    if result.chars:
        print(f"  characters: {describe_chars(result.chars)}")
    if result.words:
        print(f"  words: {describe(result.words, result.tokenizer)}")
    return 0


def _split_pair(line: str) -> tuple[str, str | None]:
    """A tab separates the two texts of a pair."""
    first, tab, second = line.partition("\t")
    return first, (second if tab else None)


def text_batches(texts: list[str], input: Path | None, size: int = 1024,
                 pairs: bool = True, text_field: str = "text"
                 ) -> Iterator[tuple[list, list, list]]:
    """(names, firsts, seconds) chunks from TEXT arguments or the texts of --input (a file,
    folder, glob or `datasets` directory): its lines, or the `text_field` of its records
    (`numbered_texts`), each named FILE:LINE by the file it is in. A tab separates a pair in
    a line of text, not in a record (a TSV row's text is one text)."""
    split = _split_pair if pairs else (lambda line: (line, None))
    if input is not None:
        from bertkit.finetuning.input_sources import STDIN, input_file

        if texts:
            raise UserError("give texts as arguments or --input FILE, not both")
        chunk = []
        name = "<stdin>" if str(input) == STDIN else input
        with input_file(input) as path:  # "-": standard input
            for source, number, line in numbered_texts(path, text_field):
                where = name if source.path == path else source.path
                chunk.append((f"{where}:{number}",
                              *(split(line) if source.format == "text" else (line, None))))
                if len(chunk) == size:
                    yield tuple(map(list, zip(*chunk)))
                    chunk = []
        if chunk:
            yield tuple(map(list, zip(*chunk)))
    elif texts:
        yield tuple(map(list, zip(*[(f"text {i + 1}", *split(t))
                                    for i, t in enumerate(texts)])))
    else:
        raise UserError("no text: give TEXT arguments or --input FILE")


@dataclass(kw_only=True)
class TokenizeOptions:
    model: Path = field(metadata={"model": True})
    """Model or tokenizer directory."""
    text: list[str] = field(default_factory=list, metadata={"positional": True})
    """Texts to tokenize; a tab separates a pair."""
    input: Path | None = None
    """A file instead: one text per line, a tab separates a pair; or JSON lines, CSV, TSV,
    Parquet or Arrow, one text per record (its --text-field); a folder, glob or `datasets`
    directory of them; "-": standard input."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    max_length: int | None = None
    """Longest input in tokens; none: the model's positions (512 for a bare tokenizer)."""
    truncation: Literal["longest_first", "only_first", "only_second", "off"] = "longest_first"
    """How to cut an over-long text; off = refuse it."""
    json: bool = False
    """One JSON object per text."""


def run_tokenize(opts: TokenizeOptions) -> int:
    from bertkit.model.hub import load_config, resolve_model
    from bertkit.text.tokenizer import Tokenizer, cut_warning

    model = resolve_model(opts.model)
    tok = Tokenizer.load(model)
    max_length = opts.max_length
    if max_length is None:
        has_config = (model / "config.json").is_file()
        max_length = load_config(model).max_positions if has_config \
            else tok.model_max_length
    truncation = False if opts.truncation == "off" else opts.truncation
    cut = total = 0
    for names, firsts, seconds in text_batches(opts.text, opts.input,
                                               text_field=opts.text_field):
        pairs = seconds if any(s is not None for s in seconds) else None
        batch = tok.encode_batch(firsts, pairs, max_length=max_length, truncation=truncation,
                                 names=names)
        cut, total = cut + int(batch.cut.sum()), total + len(batch)
        for enc in batch:
            if opts.json:
                print(json.dumps(enc.to_dict(), ensure_ascii=False))
            else:
                print(f"{len(enc)}\t{' '.join(enc.tokens)}\t{' '.join(map(str, enc.ids))}")
    cut_warning(cut, total, max_length)
    return 0


COMMANDS = (
    Command("tokenizer train", run_tokenizer_train, ("bertkit.text.vocab:TokenizerTrainOptions",),
            help="train a vocabulary from text files (streaming)"),
    Command("tokenizer extend", run_tokenizer_extend, (TokenizerExtendOptions,),
            help="add a domain's most useful words to a model's vocabulary, with their rows",
            description="Count the words of --input as the model's tokenizer reads them, add "
                        "the --add that save the most pieces (count x (pieces - 1)) to the "
                        "vocabulary, and give each a row in the embeddings and the masked-LM "
                        "decoder, started at the mean of its old pieces' rows."),
    Command("tokenize", run_tokenize, (TokenizeOptions,),
            help="show the tokens, ids, segments, offsets of texts"),
)
