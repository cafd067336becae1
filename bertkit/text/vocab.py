"""Training a vocabulary from text files, streaming, with Jurafsky & Martin's multilingual sampling (eq. 11.7).

Several files (say one per language) are mixed with the textbook's exponent alpha: file i, holding
a share p_i = n_i / sum_k n_k of the corpus' n non-blank lines, contributes a share

    q_i = p_i^alpha / sum_j p_j^alpha

of the training lines (alpha = 1 keeps the natural mixture, alpha -> 0 makes it uniform;
0.3 as in XLM-R). The sampled stream is as long as the corpus: a small file is read several
times over, a large one is thinned, each line kept independently so the whole file is
represented. Lines come from open files one at a time (any format of `bertkit.text.sources`:
text, JSONL, CSV, TSV, Parquet, Arrow, compressed or not), so reading takes constant memory
however large the corpus. The `tokenizers` trainer keeps a count of every distinct word, which
grows with the text: a corpus of more than `sample_bytes` (1 GB by default) is sampled, each
line kept independently with probability sample_bytes / text bytes (every stream's rate above
scaled by it), so the vocabulary sees about 1 GB drawn evenly from the whole corpus; the
command says so.

The same files and seed give the same vocabulary, byte for byte. The `tokenizers` trainers do
not on their own: they keep the word counts in a hash map seeded at random in every call, and
hand out ids in its iteration order where nothing else decides — the WordPiece trainer to the
`##` continuation characters (whose ids then break ties between equally frequent merges, so
even the set of pieces can change), the Unigram trainer to the characters it must keep (whose
scores are spaced by their rank in that order), and the Unigram EM sums its floats in that
order (scores differ in the last bit). So `train_tokenizer` registers the continuation
characters up front in sorted order, and rebuilds the trained vocabulary in a canonical order:
the special tokens, then characters, then pieces (WordPiece: in merge order; Unigram: by score,
ties by the piece).
"""
from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Literal, Sequence

import tokenizers
from tokenizers import Regex, decoders, normalizers, pre_tokenizers, trainers

from bertkit.files import UserError, check_not_input
from bertkit.progress import Progress
from bertkit.text.sources import Source, expand_one, paragraphs, why_empty
from bertkit.text.quotes import quote_steps
from bertkit.text.tokenizer import (SPECIAL_TOKENS, UNK, Tokenizer, add_special_tokens,
                                    bert_pipeline, bert_template)

KINDS = ("wordpiece", "unigram")


DEFAULT_SAMPLE_BYTES = 1_000_000_000
"""Text a vocabulary is trained on at most, by default: the trainer holds a count of every
distinct word it sees, which grows with the text, so a larger corpus is sampled down to this
(SentencePiece's own default, input_sentence_size, is 10M sentences: about as much)."""


def _sources(component, text_field: str = "text", out=None) -> list[Source]:
    """The sources of one part of the mixture: a file, folder, glob or `datasets` directory
    (any format of `bertkit.text.sources`; the output folder `out` left out), or the sources
    it expands to."""
    if isinstance(component, (str, os.PathLike)):
        return expand_one(component, text_field, "input file", [out] if out else [])
    return list(component)


def count_text(sources: Sequence[Source], chars: set[str] | None = None) -> tuple[int, int]:
    """(non-blank paragraphs, their UTF-8 bytes) of the sources, in one streaming pass that
    also checks them (UTF-8, JSON, fields, compressed data); the characters of those
    paragraphs are added to `chars` when given."""
    n = size = 0
    for paragraph in paragraphs(sources):
        n += 1
        size += len(paragraph.encode("utf-8"))
        if chars is not None:
            chars.update(paragraph)
    if n == 0:
        raise UserError(f"{sources[0].path}: no text ({why_empty(sources)})")
    return n, size


def count_lines(path: str | Path, chars: set[str] | None = None) -> int:
    """Non-blank lines (paragraphs) of a file, folder or glob (one streaming pass that also
    checks it); the characters of those lines are added to `chars` when given."""
    return count_text(_sources(path), chars)[0]


def mixture_weights(sizes: Sequence[int], alpha: float) -> list[float]:
    """q_i = p_i^alpha / sum_j p_j^alpha with p_i = sizes[i] / sum(sizes)."""
    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"alpha must be in [0, 1], got {alpha}")
    total = sum(sizes)
    powered = [(n / total) ** alpha for n in sizes]
    return [w / sum(powered) for w in powered]


def _stream(sources: list[Source], rate: float, rng: random.Random) -> Iterator[str]:
    """Each non-blank paragraph `rate` times on average: floor(rate) full passes over the
    sources, then one pass keeping each paragraph with probability frac(rate)."""
    passes, keep = int(rate), rate - int(rate)
    for k in range(passes + (keep > 0)):
        last = k == passes
        for line in paragraphs(sources):
            if not last or rng.random() < keep:
                yield line


def mixed_lines(files: Sequence, alpha: float = 0.3, seed: int = 0,
                sizes: Sequence[int] | None = None, keep: float = 1.0) -> Iterator[str]:
    """Lines from `files` (each a file, folder or glob, or a list of sources) mixed by the q_i above, interleaved at random
    (any prefix of the stream follows the mixture). A generator: nothing is held but one line
    per file. `keep` < 1 samples the corpus: the stream is that share of the corpus' length,
    each line drawn independently (every part of every file equally likely to be kept).

    `sizes` (non-blank line counts) is computed with `count_text` when not given.
    """
    parts = [_sources(f) for f in files]
    sizes = list(sizes) if sizes is not None else [count_text(p)[0] for p in parts]
    q = mixture_weights(sizes, alpha)
    total = sum(sizes)
    rng = random.Random(seed)
    streams = [_stream(part, keep * qi * total / n, random.Random(f"{seed}:{i}"))
               for i, (part, qi, n) in enumerate(zip(parts, q, sizes))]
    weights = list(q)
    active = list(range(len(streams)))
    while active:
        # Every stream's expected length is q_i * total, so choosing by q_i drains them together.
        j = rng.choices(range(len(active)), weights=[weights[i] for i in active])[0]
        line = next(streams[active[j]], None)
        if line is None:
            active.pop(j)
        else:
            yield line


def _batches(lines: Iterator[str], progress: Progress, size: int = 1000) -> Iterator[list[str]]:
    """Lines grouped for the Rust trainer (one Python call per batch, not per line)."""
    batch = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            progress.update(add=size)
            yield batch
            batch = []
    if batch:
        progress.update(add=len(batch))
        yield batch
    progress.finish()


def _unigram_normalizer(cased: bool, plain_quotes: bool) -> normalizers.Normalizer:
    steps = [*(quote_steps() if plain_quotes else []), normalizers.NFKC(),
             normalizers.Replace(Regex(r"\s+"), " "),  # SentencePiece collapses whitespace
             normalizers.Replace(Regex(r"[\p{Cc}\p{Cf}]"), ""),  # and drops control characters
             normalizers.Strip()]
    if not cased:
        steps += [normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                  normalizers.NFKC()]
    return normalizers.Sequence(steps)


def words_of(backend: tokenizers.Tokenizer) -> Callable[[str], list[str]]:
    """The words a text is to the tokenizer's model: normalized and pre-tokenized as the
    tokenizer does (cut at spaces where it has no pre-tokenizer)."""
    normalize = backend.normalizer.normalize_str if backend.normalizer else (lambda s: s)
    if backend.pre_tokenizer is None:
        return lambda text: normalize(text).split()
    split = backend.pre_tokenizer.pre_tokenize_str
    return lambda text: [word for word, _ in split(normalize(text))]


def continuation_pieces(backend: tokenizers.Tokenizer, chars: set[str]) -> list[str]:
    """`##c` for every character c that the normalizer and pre-tokenizer can leave inside a
    word (not punctuation, spaces or CJK characters, which stand alone), sorted."""
    words, pieces = words_of(backend), set()
    for c in chars:
        for word in words("a" + c):
            pieces.update("##" + d for d in word[1:])
    return sorted(pieces)


def _untrained(kind: str, vocab_size: int, cased: bool, plain_quotes: bool, min_frequency: int,
               show_progress: bool, chars: set[str] | None
               ) -> tuple[tokenizers.Tokenizer, trainers.Trainer]:
    if kind == "wordpiece":
        backend = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token=UNK))
        # BERT: uncased strips accents too; cased keeps both (strip_accents=None follows case).
        bert_pipeline(backend, lowercase=not cased, strip_accents=None,
                      plain_quotes=plain_quotes)
        # Registered with the specials, the continuation characters take their ids in sorted
        # order rather than the trainer's hash-map order (see the module docstring); they are
        # made ordinary pieces again in `_canonical`.
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS) + continuation_pieces(backend, chars or set()),
            continuing_subword_prefix="##", show_progress=show_progress)
    elif kind == "unigram":
        backend = tokenizers.Tokenizer(tokenizers.models.Unigram())
        backend.normalizer = _unigram_normalizer(cased, plain_quotes)
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), unk_token=UNK,
            show_progress=show_progress)
    else:
        raise UserError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    return backend, trainer


def _alphabet(backend: tokenizers.Tokenizer, lines: Iterator[str]) -> set[str]:
    """The characters a Unigram vocabulary must hold: those of the normalized text, spaces
    as the word-start mark."""
    chars = {"\u2581"}
    for line in lines:
        chars.update(backend.normalizer.normalize_str(line).replace(" ", "\u2581"))
    return chars


def _penalty_chars(vocab: list[list]) -> set[str]:
    """The characters the Unigram trainer kept although its model had dropped them: it scores
    them min_score, min_score + 0.0001, min_score + 0.0002, ... in its hash-set order."""
    scores = {}
    for piece, score in vocab:
        if len(piece) == 1:
            scores.setdefault(score, []).append(piece)
    if not scores:
        return set()
    base, penalty, found = min(scores), 0.0, set()
    while len(scores.get(base + penalty, ())) == 1:  # the trainer's own float arithmetic
        found.add(scores[base + penalty][0])
        penalty += 0.0001
    return found


def _canonical(backend: tokenizers.Tokenizer, kind: str) -> tokenizers.Tokenizer:
    """The trained vocabulary in an order that depends only on its content: the special tokens,
    then single characters (WordPiece: then `##` characters), then the other pieces (WordPiece:
    in merge order; Unigram: by score, rounded below the EM's last-bit noise, ties by piece)."""
    spec = json.loads(backend.to_str())
    spec["added_tokens"] = []
    if kind == "wordpiece":
        vocab = spec["model"]["vocab"]
        def rank(piece: str) -> tuple:
            if piece in SPECIAL_TOKENS:
                return 0, SPECIAL_TOKENS.index(piece)
            if len(piece) == 1 or (piece.startswith("##") and len(piece) == 3):
                return 1 + (len(piece) == 3), piece
            return 3, vocab[piece]
        spec["model"]["vocab"] = {piece: i for i, piece in enumerate(sorted(vocab, key=rank))}
    else:
        vocab = spec["model"]["vocab"]
        specials = sorted((ps for ps in vocab if ps[0] in SPECIAL_TOKENS),
                          key=lambda ps: SPECIAL_TOKENS.index(ps[0]))
        rest = [ps for ps in vocab if ps[0] not in SPECIAL_TOKENS]
        # The trainer's scores for these characters are their rank in a random order: give the
        # same scores out in the characters' own order.
        chars = _penalty_chars(rest)
        scores = iter(sorted((s for p, s in rest if p in chars), reverse=True))
        by_char = {p: next(scores) for p in sorted(chars)}
        rest = [[p, round(by_char.get(p, s), 8)] for p, s in rest]
        spec["model"]["vocab"] = specials + sorted(rest, key=lambda ps: (-ps[1], ps[0]))
        spec["model"]["unk_id"] = SPECIAL_TOKENS.index(UNK)
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def train_tokenizer(files: Sequence, vocab_size: int = 30000,
                    kind: str = "wordpiece", cased: bool = False, alpha: float = 0.3,
                    out: str | Path | None = None, *, min_frequency: int = 2,
                    model_max_length: int = 512, seed: int = 0, plain_quotes: bool = True,
                    text_field: str = "text", sample_bytes: int | None = DEFAULT_SAMPLE_BYTES,
                    say: Callable[[str], object] | None = print,
                    progress: bool = True, announce: str | None = None) -> Tokenizer:
    """Train a WordPiece (BERT) or Unigram (XLM-R style) vocabulary from text.

    `files`: the parts of the mixture, each a file, folder, glob or `datasets` directory in
    any format of `bertkit.text.sources` (JSONL and tables: the `text_field` of each object or
    row), or a list of sources. Uncased by default (lower-case, strip accents); `cased=True`
    keeps both. Typographic
    quotes are read as plain ones (‘ ’ as ', “ ” as "; `plain_quotes=False` keeps them apart),
    in the vocabulary's normalizer, so text typed either way gets the same pieces. The special
    tokens take ids 0..4: [PAD] [UNK] [CLS] [SEP] [MASK]. Several parts are mixed with exponent
    `alpha` (see the module docstring). A corpus of more than `sample_bytes` of text is
    sampled down to about that much, each line kept independently with the same probability
    (seeded; None: never), and `say` (print: stdout) is given the line saying so. Every file is checked
    (exists, not empty, UTF-8, fields, compressed data) before training starts, and `out`, if
    given, is written only when training succeeded. `announce`: a line for `say` once the
    files are checked (what is being trained): bad input is then the only thing said.
    """
    if not files:
        raise UserError("no input files given")
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise UserError(f"vocab_size {vocab_size} is too small")
    if out is not None and (Path(out) / "config.json").is_file():
        raise UserError(f"{out}: holds a model (config.json), whose embeddings a new vocabulary "
                        f"would not fit; choose another --out (then `bertkit init --tokenizer`)")
    if sample_bytes is not None and sample_bytes < 1:
        raise UserError(f"sample_bytes must be positive, got {sample_bytes}")
    parts = [_sources(f, text_field, out) for f in files]
    chars = set() if kind == "wordpiece" else None  # only WordPiece needs its characters
    check_not_input(out, [s.path for part in parts for s in part])
    counted = [count_text(part, chars) for part in parts]
    sizes = [lines for lines, _ in counted]
    keep = sample_share(sum(size for _, size in counted), sample_bytes)
    if announce is not None and say is not None:
        say(announce)
    if keep < 1 and say is not None:
        total = sum(size for _, size in counted)
        say(f"tokenizer: the corpus holds {_amount(total)} of text, more than the "
            f"{_amount(sample_bytes)} a vocabulary is trained on (--sample-bytes): training "
            f"on a sample of {keep:.1%} of its lines, each kept independently (seed {seed})")
    # The trainer's own bars (reading, merges, pruning) only make sense on a terminal; there
    # they are the progress (two live bars would draw over each other), in a log ours is.
    on_terminal = sys.stderr.isatty()
    backend, trainer = _untrained(kind, vocab_size, cased, plain_quotes, min_frequency,
                                  progress and on_terminal, chars)
    report = Progress(f"training {kind} vocabulary", round(sum(sizes) * keep), "lines",
                      enabled=progress and not on_terminal)
    try:
        backend.train_from_iterator(
            _batches(mixed_lines(parts, alpha, seed, sizes, keep), report), trainer)
    except Exception as e:  # the Rust trainer raises a bare Exception
        if "not large enough to contain all chars" not in str(e):
            raise
        smallest = len(_alphabet(backend, mixed_lines(parts, alpha, seed, sizes, keep)))
        raise UserError(f"{parts[0][0].path}: vocab_size {vocab_size} is too small for a "
                        f"Unigram vocabulary of this text: it needs at least {smallest}, one "
                        f"piece for each of its characters") from None
    backend = _canonical(backend, kind)
    add_special_tokens(backend, mask_lstrip=kind == "unigram")
    bert_template(backend)
    tokenizer = Tokenizer(backend, model_max_length=model_max_length,
                          source=str(parts[0][0].path))
    if out is not None:
        tokenizer.save(out)
    return tokenizer


def sample_share(text_bytes: int, sample_bytes: int | None) -> float:
    """The share of a corpus' lines a vocabulary is trained on: all of them, or for a corpus
    of more than `sample_bytes` of text about that much."""
    if sample_bytes is None or text_bytes <= sample_bytes:
        return 1.0
    return sample_bytes / text_bytes


def _amount(size: int) -> str:
    """Bytes as a reader takes them in: "5.20 GB", "12.3 MB", "900 bytes"."""
    if size >= 100_000_000:
        return f"{size / 1e9:.2f} GB"
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size:,} bytes"


@dataclass(kw_only=True)
class TokenizerTrainOptions:
    """The settings of `train_tokenizer` (`bertkit tokenizer train`)."""

    input: list[Path]
    """Text files, one paragraph or sentence per line, or JSONL, CSV, TSV, Parquet, `datasets`
    directories (their --text-field), compressed or not; a folder or a glob (quoted) is one
    input. Several inputs (one per language) are mixed with exponent --alpha."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    out: Path = field(metadata={"output": "directory"})
    """Directory for the tokenizer files."""
    vocab_size: int = 30000
    """Tokens in the vocabulary, special tokens included."""
    kind: Literal["wordpiece", "unigram"] = "wordpiece"
    """wordpiece: BERT (## pieces); unigram: SentencePiece, XLM-R style."""
    cased: bool = False
    """Keep case and accents (off: lower-case and strip accents)."""
    plain_quotes: bool = True
    """Read typographic quotes as plain ones (‘ ’ as ', “ ” as "), so that text typed either
    way gets the same pieces; off: BERT's normalizer alone, which keeps them apart."""
    alpha: float = 0.3
    """q_i = p_i^alpha / sum_j p_j^alpha: the share of file i in training."""
    min_frequency: int = 2
    """WordPiece: ignore merges seen fewer times."""
    seed: int = 0
    """Seeds the mixing of the files (and the sample of a large corpus)."""
    sample_bytes: int | None = DEFAULT_SAMPLE_BYTES
    """A corpus of more text than this is sampled down to about this much, each line kept
    with the same probability (the trainer's word counts grow with the text); none: all."""
    quiet: bool = False
    """No progress on stderr."""

    def train(self) -> Tokenizer:
        """The vocabulary these settings describe, trained and saved to `out`."""
        return train_tokenizer(self.input, vocab_size=self.vocab_size, kind=self.kind,
                               cased=self.cased, alpha=self.alpha, out=self.out,
                               min_frequency=self.min_frequency, seed=self.seed,
                               plain_quotes=self.plain_quotes, text_field=self.text_field,
                               sample_bytes=self.sample_bytes, progress=not self.quiet)
