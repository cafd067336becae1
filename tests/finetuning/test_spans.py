"""Span NER head: every span up to L words, [FFN_start; FFN_end; attention pooling] checked
against a span-by-span computation, targets, NULL margin and nested / flat decoding."""
from __future__ import annotations

import torch

from bertkit.finetuning.tasks.spans import (NULL, SpanHead, decode_spans, span_loss,
                                            span_margins, span_mask, span_targets, too_long)


def test_span_mask_keeps_spans_inside_each_sentence():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    inside = span_mask(mask, 3)
    assert inside.shape == (2, 4, 3)
    assert inside[0, 0].tolist() == [True, True, True]
    assert inside[0, 1].tolist() == [True, True, False]
    assert inside[0, 2].tolist() == [True, False, False]
    assert not inside[0, 3].any()
    assert inside[1].sum() == 1
    # a word with no pieces (a hole in the mask): no span crosses it; brute force agrees
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(6, 9, generator=g) < 0.7
    brute = torch.tensor([[[i + l < 9 and bool(mask[b, i:i + l + 1].all()) for l in range(4)]
                           for i in range(9)] for b in range(6)])
    assert torch.equal(span_mask(mask, 4), brute)


def test_head_matches_span_by_span_computation():
    torch.manual_seed(0)
    head = SpanHead(hidden_size=8, num_types=3, max_width=3, ffn_size=5, dropout=0.0).eval()
    z = torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    logits = head(z, mask)
    assert logits.shape == (2, 5, 3, 4)
    for b in range(2):
        n = int(mask[b].sum())
        for i in range(5):
            for l in range(3):
                j = i + l
                if j >= n:
                    # outside the sentence: only NULL is possible
                    assert logits[b, i, l, NULL] == 0
                    assert torch.isinf(logits[b, i, l, 1:]).all()
                    continue
                inner = z[b, i:j + 1]
                w = torch.softmax(head.attn_score(inner).squeeze(-1), 0)
                rep = torch.cat([head.start(z[b, i]), head.end(z[b, j]), w @ inner])
                torch.testing.assert_close(logits[b, i, l], head.classify(rep), atol=1e-5,
                                           rtol=1e-5)


def test_targets_and_too_long_entities():
    ents = [[(0, 1, 2), (0, 0, 1), (1, 5, 3)], []]  # nested (0,0) inside (0,1); (1,5) too long
    target = span_targets(ents, num_words=6, max_width=3)
    assert target[0, 0, 1] == 2 and target[0, 0, 0] == 1
    assert int((target != NULL).sum()) == 2
    assert too_long(ents, 3) == 1


def test_loss_ignores_spans_outside_sentence():
    torch.manual_seed(1)
    logits = torch.randn(1, 4, 2, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0]], dtype=torch.bool)
    target = torch.zeros(1, 4, 2, dtype=torch.long)
    span_loss(logits, target, mask).backward()
    assert logits.grad[0, 2:].abs().sum() == 0
    assert logits.grad[0, 1, 1].abs().sum() == 0  # span (1, 2) runs past the end
    assert logits.grad[0, 0, 1].abs().sum() > 0


def _logits_for(spans, W=4, L=3, K=3):
    logits = torch.zeros(1, W, L, K)
    logits[..., NULL] = 5.0
    for i, l, t, v in spans:
        logits[0, i, l, t] = v
    return logits


def test_decode_nested_flat_and_margin():
    # (0..1, type 1) strong, nested (1..1, type 2) weaker, overlapping (1..2, type 1) weakest
    logits = _logits_for([(0, 1, 1, 9.0), (1, 0, 2, 7.0), (1, 1, 1, 6.0)])
    mask = torch.ones(1, 4, dtype=torch.bool)
    nested = decode_spans(logits, mask, nested=True)[0]
    assert [(s, e, t) for s, e, t, _ in nested] == [(0, 1, 1), (1, 1, 2), (1, 2, 1)]
    flat = decode_spans(logits, mask, nested=False)[0]
    assert [(s, e, t) for s, e, t, _ in flat] == [(0, 1, 1)]
    # A margin of 3 nats keeps only the span whose type beats NULL by more than that.
    strict = decode_spans(logits, mask, margin=3.0)[0]
    assert [(s, e, t) for s, e, t, _ in strict] == [(0, 1, 1)]
    margins = span_margins(logits, mask)
    assert margins.numel() == int(span_mask(mask, 3).sum())
    assert (margins > 0).sum() == 3


def test_head_learns_nested_entities():
    # Synthetic: word vectors are one-hot kinds of the word and its two neighbours (a stand-in
    # for context); pairs of kind-1 words are type 1 and every kind-1 word is type 2 (nested).
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    kinds = torch.randint(0, 3, (64, 6), generator=g)
    one_hot = torch.nn.functional.one_hot(kinds, 3).float()
    pad = torch.zeros(64, 1, 3)
    z = torch.cat([one_hot, torch.cat([pad, one_hot[:, :-1]], 1),
                   torch.cat([one_hot[:, 1:], pad], 1)], -1)  # [64, 6, 9]
    mask = torch.ones(64, 6, dtype=torch.bool)
    ents = []
    for row in kinds.tolist():
        e = [(i, i, 2) for i, k in enumerate(row) if k == 1]
        e += [(i, i + 1, 1) for i in range(5) if row[i] == 1 and row[i + 1] == 1]
        ents.append(e)
    target = span_targets(ents, 6, 2)
    head = SpanHead(9, 2, max_width=2, ffn_size=16, dropout=0.0)
    opt = torch.optim.Adam(head.parameters(), lr=0.03)
    for _ in range(150):
        opt.zero_grad()
        span_loss(head(z, mask), target, mask).backward()
        opt.step()
    pred = decode_spans(head(z, mask), mask)
    got = [{(s, e, t) for s, e, t, _ in p} for p in pred]
    assert sum(g == set(e) for g, e in zip(got, ents)) >= 56


def test_null_weight_lets_entity_spans_count_for_more():
    torch.manual_seed(2)
    logits = torch.randn(1, 3, 2, 3)
    mask = torch.ones(1, 3, dtype=torch.bool)
    target = torch.zeros(1, 3, 2, dtype=torch.long)
    target[0, 1, 0] = 2
    inside = span_mask(mask, 2)
    per_span = torch.nn.functional.cross_entropy(logits[inside], target[inside], reduction="none")
    w = torch.where(target[inside] == NULL, 0.25, 1.0)
    torch.testing.assert_close(span_loss(logits, target, mask, null_weight=0.25),
                               (per_span * w).sum() / w.sum())
    torch.testing.assert_close(span_loss(logits, target, mask), per_span.mean())
