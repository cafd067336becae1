"""Masking for masked-language-model pretraining: pure tensor functions taking a torch.Generator.

    ids, labels = mask_tokens(input_ids, special_mask, mask_id=4, sampling_probs=p, generator=g)

All three modes select tokens, then replace each selected unit (a token, a word, a span) by
[MASK] with probability `mask_frac`, by a random token with probability `random_frac`
(drawn from `sampling_probs`: the corpus unigram distribution with zero on special tokens, or
uniform over the non-special ones; see `sampling_probs`) and leave it unchanged otherwise.
`labels` holds the original id at selected positions and -100 elsewhere.

Selection is an exact count per sequence, as in the original BERT data generator: each row
selects round(n * mlm_prob) of its n non-special tokens (at least one, at most
`max_predictions`), uniformly at random. So every row of a packed batch has the same number of
targets, a batch's count is the sum of its rows' counts (a global batch split over DDP ranks
has exactly the targets of the unsplit batch) and the fixed-size prediction buffer of a batch
rarely overflows. Whole-word and span masking never exceed the count: a word or span that
would is skipped (BERT's whole-word rule), so they reach it exactly unless only longer words
are left.

Special tokens ([CLS], [SEP], [PAD], [MASK], [UNK]) are never selected and never drawn, and
spans never cross them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from bertkit.model.heads import IGNORE_INDEX

"""Label of positions that are not predicted (the cross-entropy ignore_index)."""


@dataclass
class MaskingConfig:
    """How tokens are chosen and corrupted for the masked-LM objective."""
    mlm_prob: float = 0.15
    """Share of the non-special tokens of each sequence that are predicted."""
    mlm_prob_final: float | None = None
    """Pretraining: the rate goes linearly from --mlm-prob at the start of the run to this at
    its end (by steps, or the clock for a time budget); none: --mlm-prob throughout. Ankner et
    al. 2023 ("Dynamic masking rate schedules") went from 30% to 15%."""
    mask_frac: float = 0.8
    """Of the selected units, the share replaced by [MASK]."""
    random_frac: float = 0.1
    """Of the selected units, the share replaced by random tokens (the rest stay unchanged)."""
    whole_word: bool = False
    """Select whole words (all pieces of a word, one replacement decision per word) instead of
    single pieces (mlm and mlm+nsp)."""
    uniform_random: bool = False
    """Draw random replacements uniformly over the non-special vocabulary instead of from the
    corpus unigram distribution."""
    max_predictions: int | None = None
    """Cap on the selected tokens of one sequence (BERT used 20 at length 128); none: no cap."""
    span_p: float = 0.2
    """Span masking: parameter of the geometric distribution of span lengths in words."""
    max_span_words: int = 10
    """Span masking: the longest span in words (the distribution is cut there and renormalised:
    mean 3.8 words at p = 0.2, as SpanBERT)."""

    def __post_init__(self) -> None:
        for name in ("mlm_prob", "mask_frac", "random_frac", "span_p"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.mlm_prob_final is not None and not 0.0 < self.mlm_prob_final <= 1.0:
            raise ValueError(f"mlm_prob_final must be in (0, 1], got {self.mlm_prob_final}")
        if self.mask_frac + self.random_frac > 1.0 + 1e-9:
            raise ValueError("mask_frac + random_frac must be at most 1")
        if self.max_span_words < 1:
            raise ValueError("max_span_words must be at least 1")
        if self.span_p <= 0:
            raise ValueError("span_p must be positive")


def mlm_prob_at(masking: MaskingConfig, fraction: float) -> float:
    """The masking rate `fraction` (0 to 1) of the way through a run."""
    if masking.mlm_prob_final is None:
        return masking.mlm_prob
    fraction = min(max(fraction, 0.0), 1.0)
    return masking.mlm_prob + (masking.mlm_prob_final - masking.mlm_prob) * fraction


def sampling_probs(counts: np.ndarray | torch.Tensor | None, vocab_size: int,
                   special_ids, *, uniform: bool = False) -> torch.Tensor:
    """float32 [vocab]: the distribution random replacements are drawn from. Unigram: the
    corpus counts; uniform (or no counts): every non-special piece alike. Specials get 0."""
    if uniform or counts is None:
        probs = torch.ones(vocab_size, dtype=torch.float64)
    else:
        probs = torch.as_tensor(np.asarray(counts, dtype=np.float64)[:vocab_size])
        probs = torch.nn.functional.pad(probs, (0, vocab_size - len(probs)))
    probs[torch.as_tensor(sorted(special_ids), dtype=torch.long)] = 0
    if probs.sum() <= 0:
        raise ValueError("no token can be drawn as a random replacement")
    return (probs / probs.sum()).float()


def special_tokens_mask(input_ids: torch.Tensor, special_ids) -> torch.Tensor:
    """bool, same shape as input_ids: the token is special (never selected)."""
    return torch.isin(input_ids, torch.as_tensor(sorted(special_ids), dtype=input_ids.dtype))


# Shared steps --------------------------------------------------------------------------------

def _budget(eligible: torch.Tensor, mlm_prob: float, max_predictions: int | None) -> torch.Tensor:
    """long [B]: tokens to select in each row: round(n * p), at least 1 when n > 0."""
    n = eligible.sum(1)
    k = torch.round(n.double() * mlm_prob).long()
    k = torch.where(n > 0, k.clamp(min=1), k)
    if max_predictions is not None:
        k = k.clamp(max=max_predictions)
    return k


def _corrupt(input_ids: torch.Tensor, selected: torch.Tensor, u: torch.Tensor, *, mask_id: int,
             sampling_probs: torch.Tensor, mask_frac: float, random_frac: float,
             generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply 80/10/10 to the selected tokens; `u` [B, T] uniform is the unit's decision."""
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    out = torch.where(selected & (u < mask_frac), torch.full_like(input_ids, mask_id), input_ids)
    randomize = selected & (u >= mask_frac) & (u < mask_frac + random_frac)
    n_random = int(randomize.sum())
    if n_random:
        drawn = torch.multinomial(sampling_probs, n_random, replacement=True, generator=generator)
        out[randomize] = drawn.to(out.dtype)
    return out, labels


def _words(eligible: torch.Tensor, word_start: torch.Tensor):
    """Word structure of each row. A word starts at a word-start piece or right after a
    special token. Returns (word id of each token [B, T], -1 on specials; words per row [B])."""
    after_special = torch.ones_like(eligible)
    after_special[:, 1:] = ~eligible[:, :-1]
    starts = eligible & (word_start | after_special)
    word_id = torch.cumsum(starts.long(), 1) - 1
    word_id = torch.where(eligible, word_id, torch.full_like(word_id, -1))
    return word_id, starts.sum(1)


# Token masking -------------------------------------------------------------------------------

def mask_tokens(input_ids: torch.Tensor, special_mask: torch.Tensor, *, mask_id: int,
                sampling_probs: torch.Tensor, mlm_prob: float = 0.15, mask_frac: float = 0.8,
                random_frac: float = 0.1, max_predictions: int | None = None,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's token masking on [B, T] ids: (corrupted ids, labels with -100 where unselected)."""
    eligible = ~special_mask
    k = _budget(eligible, mlm_prob, max_predictions)
    keys = torch.rand(input_ids.shape, generator=generator)
    keys = torch.where(eligible, keys, torch.full_like(keys, 2.0))
    rank = torch.empty_like(input_ids)
    order = keys.argsort(1)
    rank.scatter_(1, order, torch.arange(input_ids.shape[1]).expand_as(order).contiguous())
    selected = eligible & (rank < k[:, None])
    u = torch.rand(input_ids.shape, generator=generator)
    return _corrupt(input_ids, selected, u, mask_id=mask_id, sampling_probs=sampling_probs,
                    mask_frac=mask_frac, random_frac=random_frac, generator=generator)


# Whole-word masking --------------------------------------------------------------------------

def whole_word_mask(input_ids: torch.Tensor, special_mask: torch.Tensor,
                    word_start: torch.Tensor, *, mask_id: int, sampling_probs: torch.Tensor,
                    mlm_prob: float = 0.15, mask_frac: float = 0.8, random_frac: float = 0.1,
                    max_predictions: int | None = None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-word masking: words in random order, each taken if it still fits the row's count
    (BERT's rule), all its pieces selected; one 80/10/10 decision per word."""
    B, T = input_ids.shape
    eligible = ~special_mask
    k = _budget(eligible, mlm_prob, max_predictions)
    word_id, n_words = _words(eligible, word_start)
    W = max(int(n_words.max()), 1)
    lengths = torch.zeros(B, W + 1, dtype=torch.long)  # column W collects the specials
    lengths.scatter_add_(1, torch.where(word_id >= 0, word_id, W), torch.ones_like(word_id))
    lengths = lengths[:, :W]
    valid = torch.arange(W)[None, :] < n_words[:, None]
    keys = torch.rand(B, W, generator=generator)
    order = torch.where(valid, keys, torch.full_like(keys, 2.0)).argsort(1)
    size = lengths.gather(1, order)  # [B, W] word lengths in the random order
    usable = valid.gather(1, order)
    chosen = torch.zeros(B, W, dtype=torch.bool)
    room = k.clone()
    # Greedy in the random order, skipping words that no longer fit: each pass takes the
    # longest prefix of the still-fitting words, which is exactly where the sequential rule
    # would next skip a word; passes repeat from there with the smaller room.
    for _ in range(T):
        fits = usable & ~chosen & (size <= room[:, None])
        if not bool(fits.any()):
            break
        take = fits & (torch.cumsum(size * fits, 1) <= room[:, None])
        chosen |= take
        room -= (size * take).sum(1)
    word_chosen = torch.zeros(B, W, dtype=torch.bool).scatter(1, order, chosen)
    safe_id = word_id.clamp(min=0)
    selected = eligible & word_chosen.gather(1, safe_id)
    u = torch.rand(B, W, generator=generator).gather(1, safe_id)
    return _corrupt(input_ids, selected, u, mask_id=mask_id, sampling_probs=sampling_probs,
                    mask_frac=mask_frac, random_frac=random_frac, generator=generator)


# Span masking --------------------------------------------------------------------------------

def span_length_probs(p: float = 0.2, max_words: int = 10) -> torch.Tensor:
    """float64 [max_words]: P(span = i + 1 words), geometric(p) cut at max_words and
    renormalised (SpanBERT's distribution; mean 3.8 at p = 0.2, max 10)."""
    i = torch.arange(max_words, dtype=torch.float64)
    probs = p * (1 - p) ** i
    return probs / probs.sum()


class SpanMasked(NamedTuple):
    input_ids: torch.Tensor
    """[B, T] corrupted ids."""
    labels: torch.Tensor
    """[B, T] original id at selected positions, -100 elsewhere."""
    span_left: torch.Tensor
    """[B, T] position of the token just before the span a selected token is in (x_{s-1}),
    -1 at unselected positions."""
    span_right: torch.Tensor
    """[B, T] position of the token just after its span (x_{e+1}), -1 elsewhere."""
    span_offset: torch.Tensor
    """[B, T] 0-based position of the token inside its span, -1 elsewhere."""


def span_mask(input_ids: torch.Tensor, special_mask: torch.Tensor, word_start: torch.Tensor, *,
              mask_id: int, sampling_probs: torch.Tensor, mlm_prob: float = 0.15,
              mask_frac: float = 0.8, random_frac: float = 0.1, span_p: float = 0.2,
              max_span_words: int = 10, max_predictions: int | None = None,
              generator: torch.Generator) -> SpanMasked:
    """SpanBERT span masking on [B, T] ids.

    Repeatedly, in every row at once: draw a length in words from `span_length_probs` and a
    start uniformly over the row's word starts; the span covers that many whole words, cut at a
    special token or the row's end, and cut back by whole words to the row's remaining count;
    it is kept unless it overlaps an earlier span. Rows stop at their count (round(n * mlm_prob)
    tokens). One 80/10/10 decision per span. Spans never contain special tokens, so both
    boundary tokens exist ([CLS] / [SEP] at worst)."""
    B, T = input_ids.shape
    eligible = ~special_mask
    k = _budget(eligible, mlm_prob, max_predictions)
    word_id, n_words = _words(eligible, word_start)
    W = max(int(n_words.max()), 1)
    pos = torch.arange(T)
    big = torch.full((B, W + 1), T, dtype=torch.long)
    target = torch.where(word_id >= 0, word_id, W)
    first_tok = big.scatter_reduce(1, target, pos.expand(B, T), "amin")[:, :W]  # [B, W]
    end_tok = torch.zeros(B, W + 1, dtype=torch.long).scatter_reduce(
        1, target, pos.expand(B, T) + 1, "amax")[:, :W]  # one past each word's last token
    valid = torch.arange(W)[None, :] < n_words[:, None]
    end_tok = torch.where(valid, end_tok, torch.full_like(end_tok, 2 * T))  # keep it sorted
    # a word's segment ends at the next special token: first word whose start is not right
    # after the previous word's end
    gap = torch.ones(B, W, dtype=torch.bool)
    gap[:, 1:] = first_tok[:, 1:] != end_tok[:, :-1]
    seg_start_idx = torch.where(gap, torch.arange(W).expand(B, W), torch.full((B, W), W))
    next_seg = torch.flip(torch.cummin(torch.flip(
        torch.cat([seg_start_idx[:, 1:], torch.full((B, 1), W)], 1), [1]), 1).values, [1])
    next_seg = torch.minimum(next_seg, n_words[:, None])  # [B, W] first word of next segment

    length_probs = span_length_probs(span_p, max_span_words).float()
    selected = torch.zeros(B, T, dtype=torch.bool)
    left = torch.full((B, T), -1, dtype=torch.long)
    right = torch.full((B, T), -1, dtype=torch.long)
    offset = torch.full((B, T), -1, dtype=torch.long)
    decision = torch.zeros(B, T)
    room = k.clone()
    rows = torch.arange(B)
    misses = torch.zeros(B, dtype=torch.long)
    for _ in range(4 * int(k.max()) + 8 if B else 0):
        # a row whose remaining count no free word fits stops after 20 misses in a row
        active = (room > 0) & (n_words > 0) & (misses < 20)
        if not bool(active.any()):
            break
        span_words = torch.multinomial(length_probs, B, replacement=True, generator=generator) + 1
        a = (torch.rand(B, generator=generator) * n_words).long().clamp(
            max=(n_words - 1).clamp(min=0))
        u_span = torch.rand(B, generator=generator)
        e = torch.minimum(a + span_words, next_seg[rows, a])  # word end, exclusive
        s = first_tok[rows, a]
        limit = s + room  # the span's tokens must end at or before this position
        fit = torch.searchsorted(end_tok, limit[:, None], right=True).squeeze(1)  # words ending <= limit
        e = torch.minimum(e, fit)
        ok = active & (e > a)
        t = end_tok[rows, (e - 1).clamp(min=0)].clamp(max=T)
        in_span = (pos[None, :] >= s[:, None]) & (pos[None, :] < t[:, None]) & ok[:, None]
        clash = (in_span & selected).any(1)
        in_span &= ~clash[:, None]
        keep = ok & ~clash
        selected |= in_span
        left = torch.where(in_span, (s - 1)[:, None], left)
        right = torch.where(in_span, t[:, None], right)
        offset = torch.where(in_span, pos[None, :] - s[:, None], offset)
        decision = torch.where(in_span, u_span[:, None], decision)
        room -= torch.where(keep, t - s, 0)
        misses = torch.where(keep, 0, misses + active.long())
    out, labels = _corrupt(input_ids, selected, decision, mask_id=mask_id,
                           sampling_probs=sampling_probs, mask_frac=mask_frac,
                           random_frac=random_frac, generator=generator)
    return SpanMasked(out, labels, left, right, offset)
