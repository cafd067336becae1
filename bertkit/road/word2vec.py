"""word2vec training: the textbooks' word2vec lesson (skip-gram and CBOW, negative sampling and
the full softmax), which writes the static vectors of bertkit.embeddings.static.

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

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.embeddings.static import StaticVectors, Tokenization
from bertkit.files import UserError
from bertkit.progress import Progress
from bertkit.text.sources import expand, paragraphs

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
    over the vocabulary (refused above 10,000 entries)."""
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
    """Threshold t of frequent-word subsampling (0 = keep every token). The word2vec tool's
    default: Mikolov et al.'s 1e-5 (2013) suits billion-word corpora; on a few million words
    it throws away so much text that the vectors stay undertrained."""
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
                chunk_lines: int = 5000, text_field: str = "text") -> Corpus:
    """Tokenize a corpus (text files, one paragraph per line, or any other shape of
    `bertkit.text.sources`: JSONL and tables by `text_field`) and keep tokens seen `min_count`
    times. A context window never crosses a paragraph's end."""
    if not paths:
        raise UserError("no corpus files given")
    per_line: list[list[str]] = []
    chunk: list[str] = []
    for paragraph in paragraphs(expand(paths, text_field, "corpus")):
        chunk.append(paragraph)
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


def train_static_vectors(paths: Sequence[str | Path], config: SkipGramConfig, tokenizer=None,
                         progress: bool = True, text_field: str = "text") -> StaticVectors:
    """Train on a corpus (`read_corpus`): whole words, or the pieces of `tokenizer` (a bertkit
    Tokenizer)."""
    tokenization = Tokenization(tokenizer)
    corpus = read_corpus(paths, tokenization, config.min_count, text_field=text_field)
    if progress:
        print(f"{len(corpus.ids):,} tokens, vocabulary {len(corpus.tokens):,} "
              f"({tokenization.kind})", file=sys.stderr)
    inp, out, stats = train_skipgram(corpus, config, progress=progress)
    return StaticVectors(corpus.tokens, corpus.counts, inp, tokenization, asdict(config),
                         asdict(stats), out)


__all__ = ["SkipGramConfig", "Corpus", "read_corpus", "noise_distribution", "sample_negatives",
           "keep_probabilities", "subsample", "skipgram_pairs", "sgns_loss", "sgns_gradients",
           "cbow_contexts", "cbow_hidden", "softmax_loss", "softmax_gradients", "TrainStats",
           "train_skipgram", "train_static_vectors", "SOFTMAX_MAX_VOCAB"]
