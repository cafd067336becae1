"""Statistical tests of the three masking modes on large synthetic batches (~250k tokens)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.model.heads import IGNORE_INDEX as IGNORE
from bertkit.pretraining.masking import (MaskingConfig, mask_tokens, sampling_probs, span_length_probs,
                             span_mask, special_tokens_mask, whole_word_mask)

PAD, UNK, CLS, SEP, MASK = range(5)
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
V = 400


def batch(rows=2000, T=128, seed=0, pair=False):
    """Rows of [CLS] text [SEP] (+ B [SEP]) [PAD]..., lengths varying, with word starts."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, V, size=(rows, T))
    length = rng.integers(T // 2, T + 1, size=rows)
    col = np.arange(T)[None, :]
    ids[col >= length[:, None]] = PAD
    ids[:, 0] = CLS
    ids[np.arange(rows), length - 1] = SEP
    if pair:
        ids[np.arange(rows), length // 2] = SEP
    ids[rng.random((rows, T)) < 0.002] = UNK
    word_start = rng.random((rows, T)) < 0.7  # words of 1-4 pieces, ~1.4 on average
    return torch.from_numpy(ids), torch.from_numpy(word_start)


def unigram():
    counts = np.random.default_rng(1).zipf(1.5, V).astype(np.float64)
    return counts, sampling_probs(counts, V, SPECIALS)


def test_sampling_probs_zero_on_specials_and_uniform_option():
    counts, probs = unigram()
    assert probs[list(SPECIALS)].sum() == 0
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    expected = counts[5:] / counts[5:].sum()
    assert np.allclose(probs[5:].numpy(), expected, atol=1e-6)
    uniform = sampling_probs(counts, V, SPECIALS, uniform=True)
    assert torch.allclose(uniform[5:], torch.full((V - 5,), 1 / (V - 5)))


@pytest.mark.parametrize("mode", ["token", "word", "span"])
def test_rates_specials_and_replacements(mode):
    ids, word_start = batch(pair=mode != "span")
    special = special_tokens_mask(ids, SPECIALS)
    counts, probs = unigram()
    g = torch.Generator().manual_seed(0)
    common = dict(mask_id=MASK, sampling_probs=probs, generator=g)
    if mode == "token":
        out, labels = mask_tokens(ids, special, **common)
    elif mode == "word":
        out, labels = whole_word_mask(ids, special, word_start, **common)
    else:
        out, labels, *_ = span_mask(ids, special, word_start, **common)
    selected = labels != IGNORE
    eligible = ~special
    # the selection: 15% of the non-special tokens of every row, never a special token
    assert not (selected & special).any()
    assert torch.equal(labels[selected], ids[selected])
    target = torch.round(eligible.sum(1).double() * 0.15).long().clamp(min=1)
    per_row = selected.sum(1)
    assert (per_row <= target).all()
    if mode == "token":
        assert torch.equal(per_row, target)
    else:  # whole units: a few rows end a token or two short
        assert (per_row == target).float().mean() > 0.9
    assert selected.sum() / eligible.sum() == pytest.approx(0.15, abs=0.003)
    # unselected tokens are untouched; 80% [MASK], 10% random, 10% kept (per token here)
    assert torch.equal(out[~selected], ids[~selected])
    masked = (out == MASK) & selected
    changed = (out != ids) & ~masked
    kept = (out == ids) & selected
    n = selected.sum().item()
    tol = 0.01 if mode == "token" else 0.02  # whole units: fewer independent decisions
    assert masked.sum().item() / n == pytest.approx(0.8, abs=tol)
    # (a random draw equal to the original counts as kept: about 1 in V, negligible here)
    assert (changed.sum().item() / n) == pytest.approx(0.1, abs=tol)
    assert kept.sum().item() / n == pytest.approx(0.1, abs=tol)
    # replacements: never special, distributed as the unigram (total variation bound)
    drawn = out[changed]
    assert not torch.isin(drawn, torch.tensor(SPECIALS)).any()
    empirical = np.bincount(drawn.numpy(), minlength=V) / len(drawn)
    tv = 0.5 * np.abs(empirical - probs.numpy()).sum()
    # expected TV of an exact sample of this size is ~ sqrt(V / n) / 2.5; allow that margin
    assert tv < 1.5 * np.sqrt(V / len(drawn)) / 2.5 + 0.01, tv


def test_replacements_follow_unigram_chi_square():
    """Many draws on a small vocabulary: Pearson chi-square within 5 sigma of its df."""
    ids = torch.full((4000, 64), 7)
    ids[:, 0] = CLS
    ids[:, -1] = SEP
    special = special_tokens_mask(ids, SPECIALS)
    counts = np.zeros(20)
    counts[5:] = np.arange(1, 16)
    probs = sampling_probs(counts, 20, SPECIALS)
    out, labels = mask_tokens(ids, special, mask_id=MASK, sampling_probs=probs, mask_frac=0.0,
                              random_frac=1.0, generator=torch.Generator().manual_seed(3))
    drawn = out[labels != IGNORE].numpy()
    observed = np.bincount(drawn, minlength=20)
    assert observed[:5].sum() == 0
    expected = probs.numpy()[5:] * len(drawn)
    chi2 = ((observed[5:] - expected) ** 2 / expected).sum()
    df = 14
    assert chi2 < df + 5 * np.sqrt(2 * df), chi2


def test_rates_are_arguments_and_max_predictions_caps():
    ids, _ = batch(rows=500)
    special = special_tokens_mask(ids, SPECIALS)
    _, probs = unigram()
    out, labels = mask_tokens(ids, special, mask_id=MASK, sampling_probs=probs, mlm_prob=0.3,
                              mask_frac=1.0, random_frac=0.0, max_predictions=20,
                              generator=torch.Generator().manual_seed(0))
    selected = labels != IGNORE
    assert (selected.sum(1) <= 20).all() and (selected.sum(1) == 20).float().mean() > 0.9
    assert (out[selected] == MASK).all()


def test_same_generator_same_masks_fresh_masks_on_each_call():
    ids, word_start = batch(rows=64)
    special = special_tokens_mask(ids, SPECIALS)
    _, probs = unigram()
    for fn in (lambda g: mask_tokens(ids, special, mask_id=MASK, sampling_probs=probs,
                                     generator=g),
               lambda g: whole_word_mask(ids, special, word_start, mask_id=MASK,
                                         sampling_probs=probs, generator=g),
               lambda g: span_mask(ids, special, word_start, mask_id=MASK, sampling_probs=probs,
                                   generator=g)):
        a = fn(torch.Generator().manual_seed(5))
        b = fn(torch.Generator().manual_seed(5))
        assert all(torch.equal(x, y) for x, y in zip(a, b))
        g = torch.Generator().manual_seed(5)
        first, second = fn(g), fn(g)
        assert not torch.equal(first[1], second[1])  # dynamic masking: a new draw each time


def _word_ids(ids, word_start):
    special = special_tokens_mask(ids, SPECIALS)
    after = torch.ones_like(special)
    after[:, 1:] = special[:, :-1]
    starts = ~special & (word_start | after)
    wid = torch.cumsum(starts.long(), 1)
    return torch.where(special, torch.zeros_like(wid), wid), starts, special


def test_whole_words_kept_whole_one_decision_per_word():
    ids, word_start = batch(rows=1000)
    special = special_tokens_mask(ids, SPECIALS)
    _, probs = unigram()
    out, labels = whole_word_mask(ids, special, word_start, mask_id=MASK, sampling_probs=probs,
                                  generator=torch.Generator().manual_seed(1))
    wid, starts, _ = _word_ids(ids, word_start)
    selected = labels != IGNORE
    rows, cols = torch.nonzero(~special, as_tuple=True)
    key = rows * 1000 + wid[rows, cols]  # one key per (row, word)
    _, inverse = torch.unique(key, return_inverse=True)
    n_words = int(inverse.max()) + 1
    sel_count = torch.zeros(n_words).index_add_(0, inverse, selected[rows, cols].float())
    size = torch.zeros(n_words).index_add_(0, inverse, torch.ones(len(rows)))
    mask_count = torch.zeros(n_words).index_add_(0, inverse, (out[rows, cols] == MASK).float())
    chosen = sel_count > 0
    assert torch.equal(sel_count[chosen], size[chosen])  # every piece of a chosen word
    all_masked = mask_count[chosen] == size[chosen]
    none_masked = mask_count[chosen] == 0
    assert (all_masked | none_masked).all()  # the [MASK] decision is the word's
    assert all_masked.float().mean().item() == pytest.approx(0.8, abs=0.015)
    assert (size[chosen] > 1).any()  # multi-piece words were chosen too


def test_span_length_distribution_mean():
    probs = span_length_probs(0.2, 10)
    mean = (probs * torch.arange(1, 11)).sum().item()
    assert mean == pytest.approx(3.8, abs=0.01)
    assert probs[0] > probs[1] > probs[-1] > 0


def test_spans_are_whole_words_with_boundaries_and_one_decision():
    ids, word_start = batch(rows=1500, T=256, seed=2)
    special = special_tokens_mask(ids, SPECIALS)
    _, probs = unigram()
    res = span_mask(ids, special, word_start, mask_id=MASK, sampling_probs=probs,
                    generator=torch.Generator().manual_seed(2))
    selected = res.labels != IGNORE
    _, starts, _ = _word_ids(ids, word_start)
    B, T = ids.shape
    row, pos = torch.nonzero(selected, as_tuple=True)
    left, right, offset = (t[row, pos] for t in (res.span_left, res.span_right, res.span_offset))
    assert torch.equal(offset, pos - left - 1)
    assert (left >= 0).all() and (right > pos).all() and (right <= T).all()
    # spans: (row, left, right) groups; each is the full run of tokens between its boundaries
    keys, span, size = torch.unique(torch.stack([row, left, right], 1), dim=0,
                                    return_inverse=True, return_counts=True)
    assert torch.equal(size, keys[:, 2] - keys[:, 1] - 1)
    r, first, stop = keys[:, 0], keys[:, 1] + 1, keys[:, 2]
    assert starts[r, first].all()  # a span begins at a word start ...
    padded = torch.cat([starts | special, torch.ones(B, 1, dtype=torch.bool)], 1)
    assert padded[r, stop].all()  # ... and ends where the next word (or a special) begins
    n_spans = len(keys)
    masked = torch.zeros(n_spans).index_add_(0, span, (res.input_ids[row, pos] == MASK).float())
    assert ((masked == 0) | (masked == size)).all()  # one decision per span
    assert (masked == size).float().mean().item() == pytest.approx(0.8, abs=0.02)
    words = torch.zeros(n_spans).index_add_(0, span, starts[row, pos].float())
    assert words.max() <= 10
    # spans are cut back at the row's count and at special tokens, which shortens some: the
    # drawn lengths have mean 3.8 (test above); the kept spans a little less
    assert 3.0 < words.mean().item() < 3.9, words.mean()
    assert (res.span_left[~selected] == -1).all() and (res.span_offset[~selected] == -1).all()


def test_masking_config_validates():
    with pytest.raises(ValueError):
        MaskingConfig(mask_frac=0.9, random_frac=0.2)
    with pytest.raises(ValueError):
        MaskingConfig(mlm_prob=1.5)
