"""Static word vectors: the seeds' word2vec lecture (skip-gram and CBOW, negative sampling
and the full softmax), the baseline that contextual vectors are measured against, with
analogies and a 2-D picture of chosen words.

Every word *type* gets one vector, whatever its context. Training slides a window over the
corpus. Skip-gram predicts each context word o from the center word c; CBOW predicts the
center word from the mean h of its context words' input vectors. With negative sampling
(the default) each prediction asks, for the true word and K noise words drawn from the
unigram distribution raised to the power 0.75, "are these neighbours?":

    loss = -log s(u_o . h) - sum_k log s(-u_k . h)       (skip-gram: h = v_c)

(s the sigmoid, v the input vectors kept at the end, u the output vectors thrown away).
The full softmax scores the true word against the whole vocabulary instead,

    loss = -log( exp(u_o . h) / sum_w exp(u_w . h) ),

exact but O(V) per prediction: refused above SOFTMAX_MAX_VOCAB entries (word2vec's remedy
for large vocabularies is negative sampling or the hierarchical softmax).
As in word2vec, frequent words are subsampled (a word of corpus frequency f is kept with
probability min(1, sqrt(t / f))) before the window is applied, and the window size is drawn
uniformly in 1..W per position, which keeps a pair at distance d with probability
(W - d + 1) / W.

Tokens are whole words (lowercased runs of letters and digits) or a bertkit tokenizer's
subword pieces; a word that is several pieces gets the mean of their vectors.

Shapes: V vocabulary, D vector width, P pairs in a batch, K negatives per pair.
"""
from __future__ import annotations

import io
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from bertkit.embeddings.standardize import unit_rows
from bertkit.figures import new_figure
from bertkit.files import UserError, atomic_dir, atomic_file, read_json, read_lines
from bertkit.model.kind import STATIC_VECTORS_FILE, STATIC_VOCAB_FILE, ModelKind, require_kind
from bertkit.progress import Progress
from bertkit.text.tokenizer import Tokenizer
from bertkit.training.settings import write_settings

WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
"""A word: letters and digits, with inner apostrophes ("don't", "father's")."""
VECTORS_FILE = STATIC_VECTORS_FILE
VOCAB_FILE = STATIC_VOCAB_FILE
TOKENIZER_DIR = "tokenizer"
SOFTMAX_MAX_VOCAB = 10_000
"""Largest vocabulary `loss="softmax"` trains: each prediction costs V dot products, which
on 2 cores is minutes per epoch of a small corpus at 10,000 words and hours beyond."""


@dataclass
class SkipGramConfig:
    """word2vec's settings: skip-gram or CBOW, negative sampling or the full softmax."""

    architecture: Literal["skipgram", "cbow"] = "skipgram"
    """skipgram: predict each context word from the center word; cbow: predict the center
    word from the mean of its context words (word2vec's CBOW; try --lr 0.05 as word2vec
    does)."""
    loss: Literal["negative", "softmax"] = "negative"
    """negative: negative sampling (K noise words per prediction); softmax: the full softmax
    over the vocabulary (refused above SOFTMAX_MAX_VOCAB entries)."""
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
        if self.architecture not in ("skipgram", "cbow"):
            raise ValueError(f"architecture must be skipgram or cbow, got {self.architecture!r}")
        if self.loss not in ("negative", "softmax"):
            raise ValueError(f"loss must be negative or softmax, got {self.loss!r}")


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


def cbow_contexts(ids: torch.Tensor, lines: torch.Tensor, window: int,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """CBOW examples: (contexts [N, 2W] ids of the words within a window drawn uniformly in
    1..W of each center on its line, -1 where there is none; centers [N]). Centers with no
    context word are left out."""
    n = len(ids)
    reach = torch.randint(1, window + 1, (n,), generator=generator)  # word2vec's b per center
    at = torch.arange(n)
    columns = []
    for d in range(1, window + 1):
        for j in (at - d, at + d):
            inside = (j >= 0) & (j < n)
            j = j.clamp(0, n - 1)
            keep = inside & (lines[j] == lines) & (d <= reach)
            columns.append(torch.where(keep, ids[j], -1))
    contexts = torch.stack(columns, 1)
    some = (contexts >= 0).any(1)
    return contexts[some], ids[some]


def cbow_hidden(vectors: torch.Tensor, contexts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """h = the mean input vector of each row's context words: vectors [V, D], contexts
    [P, C] ids (-1 = none) -> (h [P, D], context words per row [P, 1])."""
    known = contexts >= 0
    count = known.sum(1, keepdim=True)
    rows = vectors[contexts.clamp(min=0)] * known.unsqueeze(-1)  # [P, C, D]
    return rows.sum(1) / count, count


def softmax_loss(hidden: torch.Tensor, output: torch.Tensor,
                 targets: torch.Tensor) -> torch.Tensor:
    """Summed full-softmax loss: -log softmax(h . U^T)[o]. hidden [P, D], output U [V, D],
    targets [P]."""
    return F.cross_entropy(hidden @ output.T, targets, reduction="sum")


def softmax_gradients(hidden: torch.Tensor, output: torch.Tensor, targets: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`softmax_loss` and its gradients in closed form (d/dlogits = softmax - one-hot).
    Returns (loss, d hidden [P, D], d output [V, D])."""
    logp = torch.log_softmax(hidden @ output.T, dim=-1)  # [P, V]
    rows = torch.arange(len(targets))
    loss = -logp[rows, targets].sum()
    d_logits = logp.exp()
    d_logits[rows, targets] -= 1.0
    return loss, d_logits @ output, d_logits.T @ hidden


# Training ----------------------------------------------------------------------------------------

@dataclass
class TrainStats:
    pairs: int = 0
    """Predictions trained on, over all epochs: (center, context) pairs for skip-gram, center
    words with their windows for CBOW."""
    seconds: float = 0.0
    final_loss: float = float("nan")
    """Mean loss per prediction over the last epoch."""
    epoch_losses: list[float] = field(default_factory=list)


def train_skipgram(corpus: Corpus, config: SkipGramConfig, *,
                   progress: bool = True) -> tuple[np.ndarray, np.ndarray, TrainStats]:
    """Train word2vec (`config.architecture`, `config.loss`) on a corpus; returns (input
    vectors [V, D], output vectors [V, D], stats)."""
    if config.loss == "softmax" and len(corpus.tokens) > SOFTMAX_MAX_VOCAB:
        raise UserError(f"--loss softmax scores every word of the vocabulary per prediction: "
                        f"{len(corpus.tokens):,} words is more than {SOFTMAX_MAX_VOCAB:,} "
                        f"(raise --min-count, or use --loss negative)")
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _train(corpus, config, progress)
    finally:
        torch.set_num_threads(threads)


def _examples(ids: torch.Tensor, lines: torch.Tensor, config: SkipGramConfig,
              g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of one epoch: skip-gram (center [P], context [P]); CBOW (contexts
    [P, 2W], center [P])."""
    if config.architecture == "cbow":
        return cbow_contexts(ids, lines, config.window, g)
    return skipgram_pairs(ids, lines, config.window, g)


def _train(corpus: Corpus, config: SkipGramConfig,
           progress: bool) -> tuple[np.ndarray, np.ndarray, TrainStats]:
    g = torch.Generator().manual_seed(config.seed)
    V, D = len(corpus.tokens), config.dim
    cbow, softmax = config.architecture == "cbow", config.loss == "softmax"
    # word2vec's initialisation: small random input vectors, zero output vectors.
    inp = (torch.rand(V, D, generator=g) - 0.5) / D
    out = torch.zeros(V, D)
    cdf = torch.cumsum(noise_distribution(corpus.counts, config.power), 0)
    keep_prob = keep_probabilities(corpus.counts, config.subsample)
    ids, lines = torch.from_numpy(corpus.ids), torch.from_numpy(corpus.lines)
    stats = TrainStats()
    start = time.perf_counter()
    bar = None
    name = "cbow" if cbow else "skip-gram"
    for epoch in range(config.epochs):
        kept = subsample(ids, keep_prob, g)
        inputs, targets = _examples(ids[kept], lines[kept], config, g)
        if len(targets) == 0:
            raise UserError("the corpus yields no (center, context) pairs: its lines are one "
                            "token long after subsampling (lower --subsample or add text)")
        if bar is None:  # the pairs of later epochs differ by a few: the total is a guess
            bar = Progress(name, len(targets) * config.epochs, "pairs", enabled=progress)
        order = torch.randperm(len(targets), generator=g)
        epoch_loss = 0.0
        for lo in range(0, len(order), config.batch_size):
            batch = order[lo:lo + config.batch_size]
            x, o = inputs[batch], targets[batch]
            if cbow:
                h, _ = cbow_hidden(inp, x)
            else:
                h = inp[x]
            done = stats.pairs / bar.total
            lr = config.lr * max(1.0 - done, 1e-4)
            # A sparse SGD step: only the rows in this batch move (all of U under softmax).
            if softmax:
                loss, g_h, g_out = softmax_gradients(h, out, o)
                out.add_(g_out, alpha=-lr)
            else:
                neg = sample_negatives(cdf, (len(batch), config.negatives), g)  # [P, K]
                loss, g_h, g_o, g_n = sgns_gradients(h, out[o], out[neg])
                out.index_add_(0, o, g_o, alpha=-lr)
                out.index_add_(0, neg.reshape(-1), g_n.reshape(-1, D), alpha=-lr)
            if cbow:
                # As word2vec does, every context word takes the whole gradient of h, not
                # 1/count of it: the mean's exact gradient would shrink its steps by the
                # window's size.
                known = x >= 0
                share = g_h.unsqueeze(1).expand(-1, x.shape[1], -1)[known]
                inp.index_add_(0, x[known], share, alpha=-lr)
            else:
                inp.index_add_(0, x, g_h, alpha=-lr)
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

    def analogy(self, a: str, b: str, c: str, k: int = 1) -> list[tuple[str, float]]:
        """a - b + c: the k vocabulary entries of highest cosine with unit(a) - unit(b) +
        unit(c), the three inputs left out (king - man + woman -> queen)."""
        unit = [unit_rows(self.vector(w)) for w in (a, b, c)]
        cos = self._unit @ unit_rows(unit[0] - unit[1] + unit[2])  # [V]
        for word in (a, b, c):
            cos[self.ids_of(word)] = -np.inf
        k = min(k, len(cos) - 1)
        top = np.argpartition(-cos, k)[:k]
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

    def save(self, path: str | Path, settings: dict | None = None) -> Path:
        """A directory: vectors.safetensors (input and context vectors), vocab.json (tokens,
        counts, tokenization, training config and stats), for pieces the tokenizer, and with
        `settings` (`bertkit.training.settings.run_settings`) training_args.json."""
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
            if settings is not None:
                write_settings(tmp, settings)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "StaticVectors":
        p = require_kind(path, ModelKind.STATIC)
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


# Analogies and pictures ----------------------------------------------------------------------

def analogy(vectors: StaticVectors, a: str, b: str, c: str, k: int = 1) -> list[tuple[str, float]]:
    """a - b + c by cosine, inputs excluded (`StaticVectors.analogy`)."""
    return vectors.analogy(a, b, c, k)


def read_analogies(path: str | Path) -> list[tuple[str, str, str, str]]:
    """Analogy questions, one `a b c d` a line (d = a - b + c); blank lines and lines
    starting with # are skipped."""
    quads = []
    for number, line in read_lines(path, "analogies"):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 4:
            raise UserError(f"{path}:{number}: expected four words `a b c d` (d = a - b + c), "
                            f"got {len(words)}")
        quads.append(tuple(w.lower() for w in words))
    if not quads:
        raise UserError(f"{path}: no analogies")
    return quads


def analogy_accuracy(vectors: StaticVectors,
                     quads: Sequence[tuple[str, str, str, str]]) -> dict:
    """Share of the questions whose nearest answer (inputs excluded) is d. Questions with a
    word out of the vocabulary are skipped and counted."""
    right, asked, missed = 0, 0, []
    for a, b, c, d in quads:
        if not all(vectors.ids_of(w) for w in (a, b, c, d)):
            missed.append(" ".join((a, b, c, d)))
            continue
        asked += 1
        right += vectors.analogy(a, b, c, 1)[0][0] == d
    return {"accuracy": right / asked if asked else float("nan"), "correct": right,
            "answered": asked, "skipped": len(missed), "skipped_questions": missed}


def pca_2d(matrix: np.ndarray) -> np.ndarray:
    """The rows of `matrix` [N, D] on their first two principal components, [N, 2]."""
    centered = np.asarray(matrix, dtype=np.float64) - np.mean(matrix, axis=0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return centered @ vt[:2].T


def plot_words(vectors: StaticVectors, words: Sequence[str], out: str | Path,
               title: str | None = None) -> np.ndarray:
    """Chosen words' vectors on their first two principal components, a labelled point
    each, written to `out` (PNG, atomically). Returns the coordinates [N, 2]."""
    if len(words) < 3:
        raise UserError("--words: give at least three words to place on a plane")
    points = pca_2d(np.stack([vectors.vector(w) for w in words]))
    fig = new_figure(out, figsize=(7, 6))  # matplotlib (the `plot` extra) only to draw
    ax = fig.add_subplot()
    ax.scatter(points[:, 0], points[:, 1], s=18)
    for word, (x, y) in zip(words, points):
        ax.annotate(word, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=10)
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    ax.set_title(title or f"{len(words)} words, {vectors.dim}-dimensional vectors, PCA")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    with atomic_file(out, "wb") as f:
        f.write(buffer.getvalue())
    return points


# A word in two contexts, for BERT ------------------------------------------------------------

def parse_span(text: str, span: str) -> tuple[int, int]:
    """A character span of `text`: "START:END", or a word (its first whole-word,
    case-insensitive occurrence)."""
    start, colon, end = span.partition(":")
    if colon and start.strip().isdigit() and end.strip().isdigit():
        a, b = int(start), int(end)
        if not 0 <= a < b <= len(text):
            raise UserError(f"span {span}: outside {text!r} ({len(text)} characters)")
        return a, b
    return find_word(text, span)


def context_similarity(embedder, text1: str, span1: tuple[int, int], text2: str,
                       span2: tuple[int, int]) -> list[float]:
    """Cosine between the contextual vectors of the word at text1[span1] and the word at
    text2[span2], one per hidden state of `embedder` (a bertkit.embeddings.Embedder): index 0
    the embedding layer, then each block. A word of several pieces is their mean."""
    out = []
    for layer in range(embedder.config.num_layers + 1):
        a, b = embedder.word_vectors([text1, text2], [span1, span2], layers=layer,
                                     subword_pool="mean")
        out.append(float(unit_rows(a) @ unit_rows(b)))
    return out


@dataclass(kw_only=True)
class ContextSimilarityOptions:
    """`bertkit similarity`: one word's contextual vectors in two texts, layer by layer."""

    text1: str = field(metadata={"positional": True, "metavar": "TEXT1"})
    """The first text."""
    span1: str = field(metadata={"positional": True, "metavar": "SPAN1"})
    """The word in TEXT1: the word itself (its first occurrence) or START:END characters."""
    text2: str = field(metadata={"positional": True, "metavar": "TEXT2"})
    """The second text."""
    span2: str = field(metadata={"positional": True, "metavar": "SPAN2"})
    """The word in TEXT2, as SPAN1."""
    model: Path
    """BERT directory (bertkit or Hugging Face)."""
    device: str = "cpu"
    """Where the model runs: cpu, cuda, cuda:1, ..."""
    json: bool = False
    """One JSON object: {"layers": [cosine per layer, 0 = embeddings]}."""


@dataclass(kw_only=True)
class AnalogyOptions:
    """`bertkit static analogy`: a - b + c, or the accuracy on a file of analogies."""

    vectors: Path
    """Directory from `bertkit static train`."""
    words: list[str] = field(default_factory=list, metadata={"positional": True,
                                                             "metavar": "WORD"})
    """A B C: the words nearest to A - B + C (king man woman -> queen)."""
    input: Path | None = None
    """Analogy questions instead, `a b c d` a line (d = a - b + c): prints the accuracy."""
    top_k: int = 1
    """Answers shown for A B C."""
    json: bool = False
    """One JSON object."""


@dataclass(kw_only=True)
class PlotWordsOptions:
    """`bertkit static plot`: chosen words on the plane of their first two principal
    components."""

    vectors: Path
    """Directory from `bertkit static train`."""
    words: list[str] = field(default_factory=list, metadata={"positional": True,
                                                             "metavar": "WORD"})
    """The words to place (at least three)."""
    out: Path = field(metadata={"output": True})
    """PNG file to write."""
    title: str | None = None
    """Title of the picture; none: the number of words and the width of the vectors."""


def find_word(text: str, word: str) -> tuple[int, int]:
    """Character span of the first whole-word, case-insensitive occurrence of `word`."""
    m = re.search(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", text, flags=re.IGNORECASE)
    if m is None:
        raise UserError(f"{word!r} does not occur as a word in {text!r}")
    return m.span()


__all__ = ["SkipGramConfig", "Tokenization", "Corpus", "read_corpus", "noise_distribution",
           "sample_negatives", "keep_probabilities", "subsample", "skipgram_pairs", "sgns_loss",
           "sgns_gradients", "cbow_contexts", "cbow_hidden", "softmax_loss",
           "softmax_gradients", "TrainStats", "train_skipgram", "StaticVectors", "analogy",
           "read_analogies", "analogy_accuracy", "pca_2d", "plot_words",
           "find_word", "WORD", "SOFTMAX_MAX_VOCAB", "parse_span", "context_similarity",
           "ContextSimilarityOptions", "AnalogyOptions", "PlotWordsOptions"]
