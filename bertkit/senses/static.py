"""Static word vectors: skip-gram with negative sampling (the seeds' word2vec), the baseline
that contextual vectors are measured against.

Every word *type* gets one vector, whatever its context. Training slides a window over the
corpus and asks, for each (center, context) pair and K noise words drawn from the unigram
distribution raised to the power 0.75, "are these neighbours?":

    loss = -log s(u_o . v_c) - sum_k log s(-u_k . v_c)

(s the sigmoid, v the input vectors kept at the end, u the context vectors thrown away).
As in word2vec, frequent words are subsampled (a word of corpus frequency f is kept with
probability min(1, sqrt(t / f))) before the window is applied, and the window size is drawn
uniformly in 1..W per position, which keeps a pair at distance d with probability
(W - d + 1) / W.

Tokens are whole words (lowercased runs of letters and digits) or a bertkit tokenizer's
subword pieces; a word that is several pieces gets the mean of their vectors.

Shapes: V vocabulary, D vector width, P pairs in a batch, K negatives per pair.
"""
from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from bertkit.embeddings.standardize import unit_rows
from bertkit.files import UserError, atomic_dir, read_json, read_lines
from bertkit.progress import Progress
from bertkit.text.tokenizer import Tokenizer

WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
"""A word: letters and digits, with inner apostrophes ("don't", "father's")."""
VECTORS_FILE = "vectors.safetensors"
VOCAB_FILE = "vocab.json"
TOKENIZER_DIR = "tokenizer"


@dataclass
class SkipGramConfig:
    dim: int = 100
    """Width D of each word vector."""
    window: int = 5
    """Largest distance W between a center word and a context word."""
    negatives: int = 5
    """Noise words K drawn per (center, context) pair."""
    epochs: int = 5
    """Passes over the corpus (each with a fresh subsample and fresh windows)."""
    min_count: int = 5
    """Tokens seen fewer times are left out of the vocabulary (and of the windows)."""
    subsample: float = 1e-3
    """Threshold t of frequent-word subsampling (0 = keep every token). word2vec's default:
    the paper's 1e-5 suits billion-word corpora; on a few million words it throws away so
    much text that the vectors stay undertrained."""
    power: float = 0.75
    """Exponent of the unigram counts in the noise distribution."""
    lr: float = 0.025
    """Starting learning rate of plain SGD on the summed loss, decayed linearly to 1e-4 of it."""
    batch_size: int = 2048
    """(center, context) pairs per update."""
    seed: int = 0
    """Seeds initialisation, subsampling, windows, shuffling and negatives."""
    threads: int = 1
    """torch threads while training. The steps are many small gathers and scatters, which
    run fastest on one thread: more threads spend their time waiting for each other."""

    def __post_init__(self) -> None:
        for name in ("dim", "window", "negatives", "epochs", "min_count", "batch_size",
                     "threads"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not 0.0 <= self.subsample < 1.0:
            raise ValueError(f"subsample must be in [0, 1), got {self.subsample}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")


# Tokens ------------------------------------------------------------------------------------------

class Tokenization:
    """Splits text into tokens with character offsets: whole lowercase words, or the pieces of
    a bertkit tokenizer (`tokenizer` given)."""

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        self._pieces: list[str] = []
        if tokenizer is not None:
            vocab = tokenizer.get_vocab()
            self._pieces = [""] * (max(vocab.values()) + 1)
            for piece, i in vocab.items():
                self._pieces[i] = piece

    @property
    def kind(self) -> str:
        return "words" if self.tokenizer is None else "pieces"

    def split(self, texts: Sequence[str]) -> list[list[tuple[str, int, int]]]:
        """(token, start, end) for every token of every text."""
        if self.tokenizer is None:
            return [[(m.group().lower(), m.start(), m.end()) for m in WORD.finditer(t)]
                    for t in texts]
        batch = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [list(zip(e.tokens, (o[0] for o in e.offsets), (o[1] for o in e.offsets)))
                for e in batch]

    def tokens(self, texts: Sequence[str]) -> list[list[str]]:
        if self.tokenizer is None:
            return [WORD.findall(t.lower()) for t in texts]
        # The fast path computes ids only (no offsets, no token strings).
        batch = self.tokenizer.encode_batch(list(texts), add_special_tokens=False,
                                            with_offsets=False)
        flat, lengths = batch.flat_ids()
        pieces = [self._pieces[i] for i in flat.tolist()]
        bounds = np.cumsum(np.r_[0, lengths]).tolist()
        return [pieces[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass
class Corpus:
    """A tokenized corpus as vocabulary ids: one flat array, and the line each token is on
    (windows never cross lines)."""

    tokens: list[str]
    """The vocabulary, most frequent first."""
    counts: np.ndarray
    """[V] occurrences of each vocabulary entry."""
    ids: np.ndarray
    """[N] int64 vocabulary id of every kept token, in corpus order."""
    lines: np.ndarray
    """[N] int64 number of the line each token came from."""


def read_corpus(paths: Sequence[str | Path], tokenization: Tokenization, min_count: int = 5,
                chunk_lines: int = 5000) -> Corpus:
    """Tokenize text files (one paragraph per line) and keep tokens seen `min_count` times."""
    if not paths:
        raise UserError("no corpus files given")
    per_line: list[list[str]] = []
    for path in paths:
        chunk: list[str] = []
        for _, line in read_lines(path, "corpus"):
            chunk.append(line)
            if len(chunk) == chunk_lines:
                per_line.extend(tokenization.tokens(chunk))
                chunk = []
        per_line.extend(tokenization.tokens(chunk))
    total: dict[str, int] = {}
    for toks in per_line:
        for t in toks:
            total[t] = total.get(t, 0) + 1
    tokens = sorted((t for t, c in total.items() if c >= min_count),
                    key=lambda t: (-total[t], t))
    if len(tokens) < 2:
        raise UserError(f"{', '.join(map(str, paths))}: fewer than two distinct tokens occur "
                        f"{min_count}+ times (empty corpus, or lower --min-count)")
    index = {t: i for i, t in enumerate(tokens)}
    lengths = np.array([len(toks) for toks in per_line], dtype=np.int64)
    flat = np.fromiter((index.get(t, -1) for toks in per_line for t in toks), dtype=np.int64,
                       count=int(lengths.sum()))
    lines = np.repeat(np.arange(len(per_line), dtype=np.int64), lengths)
    known = flat >= 0
    return Corpus(tokens, np.array([total[t] for t in tokens], dtype=np.int64), flat[known],
                  lines[known])


# The pieces of the objective: pure functions -------------------------------------------------

def noise_distribution(counts: np.ndarray | torch.Tensor, power: float = 0.75) -> torch.Tensor:
    """P(w) proportional to count(w)^power, [V] float64."""
    p = torch.as_tensor(counts, dtype=torch.float64) ** power
    return p / p.sum()


def sample_negatives(noise_cdf: torch.Tensor, shape: tuple[int, ...],
                     generator: torch.Generator) -> torch.Tensor:
    """Draw ids from the distribution whose cumulative sums are `noise_cdf` [V] (inverse CDF:
    one uniform number and one binary search per draw)."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64)
    return torch.searchsorted(noise_cdf, u).clamp_(max=len(noise_cdf) - 1)


def keep_probabilities(counts: np.ndarray | torch.Tensor, threshold: float) -> torch.Tensor:
    """Probability of keeping each token of the vocabulary, min(1, sqrt(t / f)) with f its
    corpus frequency (Mikolov et al. 2013); all ones when threshold is 0."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    if threshold <= 0:
        return torch.ones_like(counts)
    freq = counts / counts.sum()
    return torch.sqrt(threshold / freq).clamp_(max=1.0)


def subsample(ids: torch.Tensor, keep_prob: torch.Tensor,
              generator: torch.Generator) -> torch.Tensor:
    """Boolean mask [N] of the tokens that survive subsampling."""
    return torch.rand(ids.shape, generator=generator, dtype=torch.float64) < keep_prob[ids]


def skipgram_pairs(ids: torch.Tensor, lines: torch.Tensor, window: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """All (center, context) id pairs within `window` tokens on the same line, both directions.

    word2vec draws a window size b in 1..W per center word; equivalently (in expectation) a
    pair at distance d is kept with probability (W - d + 1) / W, drawn independently here.
    """
    centers, contexts = [], []
    for d in range(1, window + 1):
        same = lines[d:] == lines[:-d]  # positions i with i and i + d on one line
        keep = same & (torch.rand(same.shape, generator=generator)
                       < (window - d + 1) / window)
        left, right = ids[:-d][keep], ids[d:][keep]
        centers += [left, right]
        contexts += [right, left]
    return torch.cat(centers), torch.cat(contexts)


def sgns_loss(center: torch.Tensor, context: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    """Summed negative-sampling loss. center, context: [P, D]; negatives: [P, K, D]."""
    positive = F.logsigmoid((center * context).sum(-1))  # [P]
    negative = F.logsigmoid(-torch.bmm(negatives, center.unsqueeze(-1)).squeeze(-1))  # [P, K]
    return -(positive.sum() + negative.sum())


def sgns_gradients(center: torch.Tensor, context: torch.Tensor, negatives: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`sgns_loss` and its gradients with respect to its three inputs, in closed form
    (d/dx of -log s(x) is s(x) - 1, of -log s(-x) is s(x)): no autograd graph on the hot
    path. Returns (loss, d center [P, D], d context [P, D], d negatives [P, K, D])."""
    pos = (center * context).sum(-1)  # [P]
    neg = torch.bmm(negatives, center.unsqueeze(-1)).squeeze(-1)  # [P, K]
    loss = -(F.logsigmoid(pos).sum() + F.logsigmoid(-neg).sum())
    d_pos = torch.sigmoid(pos) - 1.0  # [P]
    d_neg = torch.sigmoid(neg)  # [P, K]
    d_center = d_pos.unsqueeze(-1) * context + torch.bmm(d_neg.unsqueeze(1), negatives).squeeze(1)
    d_context = d_pos.unsqueeze(-1) * center
    d_negatives = d_neg.unsqueeze(-1) * center.unsqueeze(1)  # [P, K, D]
    return loss, d_center, d_context, d_negatives


# Training ----------------------------------------------------------------------------------------

@dataclass
class TrainStats:
    pairs: int = 0
    """(center, context) pairs trained on, over all epochs."""
    seconds: float = 0.0
    final_loss: float = float("nan")
    """Mean loss per pair over the last epoch."""
    epoch_losses: list[float] = field(default_factory=list)


def train_skipgram(corpus: Corpus, config: SkipGramConfig, *,
                   progress: bool = True) -> tuple[np.ndarray, np.ndarray, TrainStats]:
    """Train on a corpus; returns (input vectors [V, D], context vectors [V, D], stats)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _train(corpus, config, progress)
    finally:
        torch.set_num_threads(threads)


def _train(corpus: Corpus, config: SkipGramConfig,
           progress: bool) -> tuple[np.ndarray, np.ndarray, TrainStats]:
    g = torch.Generator().manual_seed(config.seed)
    V, D = len(corpus.tokens), config.dim
    # word2vec's initialisation: small random input vectors, zero context vectors.
    inp = (torch.rand(V, D, generator=g) - 0.5) / D
    out = torch.zeros(V, D)
    cdf = torch.cumsum(noise_distribution(corpus.counts, config.power), 0)
    keep_prob = keep_probabilities(corpus.counts, config.subsample)
    ids, lines = torch.from_numpy(corpus.ids), torch.from_numpy(corpus.lines)
    stats = TrainStats()
    start = time.perf_counter()
    bar = None
    for epoch in range(config.epochs):
        kept = subsample(ids, keep_prob, g)
        centers, contexts = skipgram_pairs(ids[kept], lines[kept], config.window, g)
        if len(centers) == 0:
            raise UserError("the corpus yields no (center, context) pairs: its lines are one "
                            "token long after subsampling (lower --subsample or add text)")
        if bar is None:  # the pairs of later epochs differ by a few: the total is a guess
            bar = Progress("skip-gram", len(centers) * config.epochs, "pairs", enabled=progress)
        order = torch.randperm(len(centers), generator=g)
        epoch_loss = 0.0
        for lo in range(0, len(order), config.batch_size):
            batch = order[lo:lo + config.batch_size]
            c, o = centers[batch], contexts[batch]
            neg = sample_negatives(cdf, (len(batch), config.negatives), g)  # [P, K]
            done = stats.pairs / bar.total
            lr = config.lr * max(1.0 - done, 1e-4)
            # A sparse SGD step: only the rows in this batch move.
            loss, g_c, g_o, g_n = sgns_gradients(inp[c], out[o], out[neg])
            inp.index_add_(0, c, g_c, alpha=-lr)
            out.index_add_(0, o, g_o, alpha=-lr)
            out.index_add_(0, neg.reshape(-1), g_n.reshape(-1, D), alpha=-lr)
            epoch_loss += float(loss)
            stats.pairs += len(batch)
            bar.update(stats.pairs, note=f"epoch {epoch + 1}/{config.epochs}, loss "
                                         f"{float(loss) / len(batch):.3f}")
        stats.epoch_losses.append(epoch_loss / len(order))
    stats.seconds = time.perf_counter() - start
    stats.final_loss = stats.epoch_losses[-1]
    bar.total = stats.pairs
    bar.finish(note="loss per pair by epoch: " + " ".join(f"{x:.3f}" for x in stats.epoch_losses))
    return inp.numpy(), out.numpy(), stats


# The trained vectors --------------------------------------------------------------------------

class StaticVectors:
    """One vector per vocabulary entry, with the tokenization they were trained with."""

    def __init__(self, tokens: list[str], counts: np.ndarray, vectors: np.ndarray,
                 tokenization: Tokenization, config: SkipGramConfig | None = None,
                 stats: TrainStats | None = None, context: np.ndarray | None = None):
        self.tokens = list(tokens)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        """[V, D] input vectors, the word vectors."""
        self.context = context
        """[V, D] context (output) vectors, kept so that training can be inspected."""
        self.tokenization = tokenization
        self.config = config
        self.stats = stats
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self._unit = unit_rows(self.vectors)

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    @classmethod
    def train(cls, paths: Sequence[str | Path], config: SkipGramConfig,
              tokenizer=None, progress: bool = True) -> "StaticVectors":
        """Train on text files: whole words, or the pieces of `tokenizer` (a bertkit
        Tokenizer)."""
        tokenization = Tokenization(tokenizer)
        corpus = read_corpus(paths, tokenization, config.min_count)
        if progress:
            print(f"{len(corpus.ids):,} tokens, vocabulary {len(corpus.tokens):,} "
                  f"({tokenization.kind})", file=sys.stderr)
        inp, out, stats = train_skipgram(corpus, config, progress=progress)
        return cls(corpus.tokens, corpus.counts, inp, tokenization, config, stats, out)

    # Looking words up ---------------------------------------------------------------------

    def ids_of(self, word: str) -> list[int]:
        """Vocabulary ids making up `word` (one for a whole word, its pieces otherwise); []
        when it is out of the vocabulary."""
        toks = self.tokenization.tokens([word])[0]
        if self.tokenization.kind == "words" and len(toks) != 1:
            return []
        ids = [self.index.get(t) for t in toks]
        return [] if not ids or None in ids else ids

    def vector(self, word: str) -> np.ndarray:
        """The word's vector [D] (mean of its pieces' vectors); UserError when unknown."""
        ids = self.ids_of(word)
        if not ids:
            raise UserError(f"{word!r} is not in the vocabulary of {len(self.tokens):,} "
                            f"{self.tokenization.kind}")
        return self.vectors[ids].mean(0)

    def similarity(self, a: str, b: str) -> float:
        """Cosine between the vectors of two words."""
        return float(unit_rows(self.vector(a)) @ unit_rows(self.vector(b)))

    def neighbors(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        """The k vocabulary entries of highest cosine with `word`, the word itself left out."""
        v = self.vector(word)
        cos = self._unit @ unit_rows(v)  # [V]
        for i in self.ids_of(word):
            cos[i] = -np.inf
        top = np.argpartition(-cos, min(k, len(cos) - 1))[:k]
        top = top[np.argsort(-cos[top])]
        return [(self.tokens[i], float(cos[i])) for i in top if np.isfinite(cos[i])]

    # Vectors for texts -------------------------------------------------------------------

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """The mean vector of each text's known tokens, [N, D] (zeros when none is known)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, toks in enumerate(self.tokenization.tokens(texts)):
            ids = [self.index[t] for t in toks if t in self.index]
            if ids:
                out[i] = self.vectors[ids].mean(0)
        return out

    def instance_vectors(self, texts: Sequence[str],
                         spans: Sequence[tuple[int, int]]) -> np.ndarray:
        """What a static model gives for a word *instance* text[start:end]: the vector of
        its type, the same in every context. [N, D]; UserError for an unknown word."""
        return np.stack([self.vector(t[a:b]) for t, (a, b) in zip(texts, spans)])

    def context_vectors(self, texts: Sequence[str], spans: Sequence[tuple[int, int]],
                        window: int = 5, include_target: bool = False) -> np.ndarray:
        """What a static model can say about a word in context: the mean vector of the known
        tokens within `window` tokens of the target `text[start:end]` (the target's own
        tokens left out unless `include_target`: they are the same for every sense).
        [N, D], zeros when no context token is known."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, (toks, (start, end)) in enumerate(zip(self.tokenization.split(texts), spans)):
            inside = [j for j, (_, a, b) in enumerate(toks) if a < end and b > start]
            if not inside:
                continue
            lo, hi = max(inside[0] - window, 0), inside[-1] + window + 1
            chosen = [t for j, (t, _, _) in enumerate(toks[lo:hi], lo)
                      if include_target or j not in inside]
            ids = [self.index[t] for t in chosen if t in self.index]
            if ids:
                out[i] = self.vectors[ids].mean(0)
        return out

    # Files -------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """A directory: vectors.safetensors (input and context vectors), vocab.json (tokens,
        counts, tokenization, training config and stats) and, for pieces, the tokenizer."""
        tensors = {"vectors": torch.from_numpy(np.ascontiguousarray(self.vectors))}
        if self.context is not None:
            tensors["context"] = torch.from_numpy(np.ascontiguousarray(self.context))
        meta = {"format": "bertkit-static", "tokenization": self.tokenization.kind,
                "tokens": self.tokens, "counts": self.counts.tolist(),
                "config": asdict(self.config) if self.config else None,
                "stats": asdict(self.stats) if self.stats else None}
        with atomic_dir(path) as tmp:
            save_file(tensors, str(tmp / VECTORS_FILE))
            (tmp / VOCAB_FILE).write_text(json.dumps(meta, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
            if self.tokenization.tokenizer is not None:
                self.tokenization.tokenizer.save(tmp / TOKENIZER_DIR)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "StaticVectors":
        p = Path(path)
        if not is_static_dir(p):
            raise UserError(f"{p}: not a static-vectors directory (no {VOCAB_FILE} and "
                            f"{VECTORS_FILE}; make one with `bertkit static train`)")
        meta = read_json(p / VOCAB_FILE, "bertkit static vocabulary", format="bertkit-static")
        try:
            with safe_open(str(p / VECTORS_FILE), "np") as f:
                vectors = f.get_tensor("vectors")
                context = f.get_tensor("context") if "context" in f.keys() else None
        except Exception as e:  # safetensors raises its own error types
            raise UserError(f"{p / VECTORS_FILE}: unreadable vectors ({e})") from None
        if vectors.shape[0] != len(meta["tokens"]):
            raise UserError(f"{p}: {vectors.shape[0]} vectors for {len(meta['tokens'])} tokens")
        tokenizer = None
        if meta["tokenization"] == "pieces":
            tokenizer = Tokenizer.load(p / TOKENIZER_DIR)
        config = SkipGramConfig(**meta["config"]) if meta.get("config") else None
        stats = TrainStats(**meta["stats"]) if meta.get("stats") else None
        return cls(meta["tokens"], np.asarray(meta["counts"]), vectors,
                   Tokenization(tokenizer), config, stats, context)


def is_static_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / VOCAB_FILE).is_file() and (p / VECTORS_FILE).is_file()


def find_word(text: str, word: str) -> tuple[int, int]:
    """Character span of the first whole-word, case-insensitive occurrence of `word`."""
    m = re.search(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", text, flags=re.IGNORECASE)
    if m is None:
        raise UserError(f"{word!r} does not occur as a word in {text!r}")
    return m.span()


__all__ = ["SkipGramConfig", "Tokenization", "Corpus", "read_corpus", "noise_distribution",
           "sample_negatives", "keep_probabilities", "subsample", "skipgram_pairs", "sgns_loss",
           "sgns_gradients", "TrainStats", "train_skipgram", "StaticVectors", "is_static_dir",
           "find_word", "WORD"]
