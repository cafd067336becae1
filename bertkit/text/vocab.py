"""Training a vocabulary from text files, streaming, with the seeds' multilingual sampling.

Several files (say one per language) are mixed with the seeds' exponent alpha: file i, holding
a share p_i = n_i / sum_k n_k of the corpus' n non-blank lines, contributes a share

    q_i = p_i^alpha / sum_j p_j^alpha

of the training lines (alpha = 1 keeps the natural mixture, alpha -> 0 makes it uniform;
0.3 as in XLM-R). The sampled stream is as long as the corpus: a small file is read several
times over, a large one is thinned, each line kept independently so the whole file is
represented. Lines come from open files one at a time, so memory stays constant however large
the corpus; the `tokenizers` trainer keeps only its word counts.

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
import random
import sys
from pathlib import Path
from typing import Iterator, Sequence

import tokenizers
from tokenizers import Regex, decoders, normalizers, pre_tokenizers, trainers

from bertkit.files import UserError, check_not_input, read_lines
from bertkit.progress import Progress
from bertkit.text.tokenizer import (SPECIAL_TOKENS, UNK, Tokenizer, add_special_tokens,
                                    bert_pipeline, bert_template, quote_steps)

KINDS = ("wordpiece", "unigram")


def count_lines(path: str | Path, chars: set[str] | None = None) -> int:
    """Non-blank lines of a text file (one streaming pass that also checks it is UTF-8); the
    characters of those lines are added to `chars` when given."""
    n = 0
    for _, line in read_lines(path):
        if line.strip():
            n += 1
            if chars is not None:
                chars.update(line)
    if n == 0:
        raise UserError(f"{path}: no text (only blank lines)")
    return n


def mixture_weights(sizes: Sequence[int], alpha: float) -> list[float]:
    """q_i = p_i^alpha / sum_j p_j^alpha with p_i = sizes[i] / sum(sizes)."""
    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"alpha must be in [0, 1], got {alpha}")
    total = sum(sizes)
    powered = [(n / total) ** alpha for n in sizes]
    return [w / sum(powered) for w in powered]


def _file_stream(path: Path, rate: float, rng: random.Random) -> Iterator[str]:
    """Each non-blank line `rate` times on average: floor(rate) full passes over the file,
    then one pass keeping each line with probability frac(rate)."""
    passes, keep = int(rate), rate - int(rate)
    for k in range(passes + (keep > 0)):
        last = k == passes
        for _, line in read_lines(path):
            if line.strip() and (not last or rng.random() < keep):
                yield line


def mixed_lines(files: Sequence[str | Path], alpha: float = 0.3, seed: int = 0,
                 sizes: Sequence[int] | None = None) -> Iterator[str]:
    """Lines from `files` mixed by the q_i above, interleaved at random (any prefix of the
    stream follows the mixture). A generator: nothing is held but one line per file.

    `sizes` (non-blank line counts) is computed with `count_lines` when not given.
    """
    sizes = list(sizes) if sizes is not None else [count_lines(f) for f in files]
    q = mixture_weights(sizes, alpha)
    total = sum(sizes)
    rng = random.Random(seed)
    streams = [_file_stream(Path(f), qi * total / n, random.Random(f"{seed}:{i}"))
               for i, (f, qi, n) in enumerate(zip(files, q, sizes))]
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


def _continuation_pieces(backend: tokenizers.Tokenizer, chars: set[str]) -> list[str]:
    """`##c` for every character c that the normalizer and pre-tokenizer can leave inside a
    word (not punctuation, spaces or CJK characters, which stand alone), sorted."""
    pieces = set()
    for c in chars:
        for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(
                "a" + c)):
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
            special_tokens=list(SPECIAL_TOKENS) + _continuation_pieces(backend, chars or set()),
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


def train_tokenizer(files: Sequence[str | Path], vocab_size: int = 30000,
                    kind: str = "wordpiece", cased: bool = False, alpha: float = 0.3,
                    out: str | Path | None = None, *, min_frequency: int = 2,
                    model_max_length: int = 512, seed: int = 0, plain_quotes: bool = True,
                    progress: bool = True) -> Tokenizer:
    """Train a WordPiece (BERT) or Unigram (XLM-R style) vocabulary from text files.

    Uncased by default (lower-case, strip accents); `cased=True` keeps both. Typographic
    quotes are read as plain ones (‘ ’ as ', “ ” as "; `plain_quotes=False` keeps them apart),
    in the vocabulary's normalizer, so text typed either way gets the same pieces. The special
    tokens take ids 0..4: [PAD] [UNK] [CLS] [SEP] [MASK]. Several files are mixed with exponent
    `alpha` (see the module docstring). Every file is checked (exists, not empty, UTF-8) before
    training starts, and `out`, if given, is written only when training succeeded.
    """
    if not files:
        raise UserError("no input files given")
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise UserError(f"vocab_size {vocab_size} is too small")
    chars = set() if kind == "wordpiece" else None  # only WordPiece needs its characters
    sizes = [count_lines(f, chars) for f in files]
    check_not_input(out, list(files))
    # The trainer's own bars (merges, pruning) only make sense on a terminal.
    backend, trainer = _untrained(kind, vocab_size, cased, plain_quotes, min_frequency,
                                  progress and sys.stderr.isatty(), chars)
    report = Progress(f"training {kind} vocabulary", sum(sizes), "lines", enabled=progress)
    try:
        backend.train_from_iterator(_batches(mixed_lines(files, alpha, seed, sizes), report),
                                    trainer)
    except Exception as e:  # the Rust trainer raises a bare Exception
        if "not large enough to contain all chars" not in str(e):
            raise
        smallest = len(_alphabet(backend, mixed_lines(files, alpha, seed, sizes)))
        raise UserError(f"{files[0]}: vocab_size {vocab_size} is too small for a Unigram "
                        f"vocabulary of this text: it needs at least {smallest}, one piece for "
                        f"each of its characters") from None
    backend = _canonical(backend, kind)
    add_special_tokens(backend, mask_lstrip=kind == "unigram")
    bert_template(backend)
    tokenizer = Tokenizer(backend, model_max_length=model_max_length, source=str(files[0]))
    if out is not None:
        tokenizer.save(out)
    return tokenizer
