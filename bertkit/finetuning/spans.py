"""Span-based NER (the seeds' 11.5.2): every word span up to L words is classified as one of the
entity types or NULL.

Spans are over words, not subwords: word i is represented by the encoder output z_i of its first
subword. A span (i, j) is [FFN_start(z_i); FFN_end(z_j); g_ij] where g_ij is self-attention
pooling over z_i..z_j (a learned score per token, softmax inside the span). A softmax over
NULL + types scores each span, so nested entities come out naturally; a NULL margin trades
recall for precision.

Shapes: B batch, W words, L longest span, H hidden, F span-FFN width, K types + 1 (NULL = 0).
Span (i, l) starts at word i and holds l + 1 words.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.files import UserError, read_jsonl
from bertkit.finetuning.tagging import tags_to_spans

NULL = 0


@dataclass
class SpanSentence:
    """Words with entity spans (start, end exclusive, type) that may nest or overlap."""
    tokens: list[str]
    spans: list[tuple[int, int, str]]
    text: str = ""
    source: str = ""
    tags: list[str] = field(default_factory=list)
    """Unused (span data has no per-word tags); present so tagging code can read any sentence."""


def gold_spans(sentence) -> list[tuple[int, int, str]]:
    """Entity spans of a SpanSentence, or of a TaggedSentence's BIO/BIOES tags."""
    if isinstance(sentence, SpanSentence):
        return list(sentence.spans)
    return tags_to_spans(sentence.tags)


def read_span_jsonl(path: str | Path) -> list[SpanSentence]:
    """Nested-entity data: one JSON object per line, {"tokens": [...], "entities": [[start, end,
    "TYPE"], ...]} with word offsets, end exclusive."""
    out = []
    for number, obj in read_jsonl(path):
        where = f"{path}:{number}"
        tokens, ents = obj.get("tokens"), obj.get("entities", [])
        if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
            raise UserError(f"{where}: 'tokens' must be a list of non-empty strings")
        if not tokens:
            raise UserError(f"{where}: empty sentence (no tokens)")
        found = []
        for e in ents if isinstance(ents, list) else [None]:
            if not (isinstance(e, list) and len(e) == 3 and all(isinstance(x, int) for x in e[:2])
                    and isinstance(e[2], str)):
                raise UserError(f"{where}: each entity must be [start, end, \"TYPE\"], got {e!r}")
            if not 0 <= e[0] < e[1] <= len(tokens):
                raise UserError(f"{where}: entity {e!r} is outside the {len(tokens)} tokens")
            found.append((e[0], e[1], e[2]))
        out.append(SpanSentence(tokens, found, " ".join(tokens), where))
    if not out:
        raise UserError(f"{path}: no sentences")
    return out


class SpanHead(nn.Module):
    """Scores every span of up to `max_width` words: [B, W, H] word vectors -> [B, W, L, K]."""

    def __init__(self, hidden_size: int, num_types: int, max_width: int = 8,
                 ffn_size: int = 150, dropout: float = 0.1):
        super().__init__()
        self.max_width = max_width
        self.num_types = num_types
        self.start = nn.Sequential(nn.Linear(hidden_size, ffn_size), nn.GELU())
        self.end = nn.Sequential(nn.Linear(hidden_size, ffn_size), nn.GELU())
        self.attn_score = nn.Linear(hidden_size, 1)
        self.classify = nn.Sequential(
            nn.Linear(2 * ffn_size + hidden_size, ffn_size), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(ffn_size, num_types + 1))
        self.dropout = nn.Dropout(dropout)

    def forward(self, z: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """z: [B, W, H] word vectors; word_mask: [B, W] bool. Returns logits [B, W, L, K];
        spans that run past the sentence get -inf scores everywhere but NULL."""
        B, W, H = z.shape
        L = self.max_width
        z = self.dropout(z)
        # windows[b, i, k] = z[b, i + k] (zero past the end): [B, W, L, H]
        padded = F.pad(z, (0, 0, 0, L - 1))
        windows = padded.unfold(1, L, 1).permute(0, 1, 3, 2)  # [B, W, L, H]
        inside = span_mask(word_mask, L)  # [B, W, L]
        score = self.attn_score(windows).squeeze(-1)  # [B, W, L]
        # Span (i, l) pools over window positions k <= l: [B, W, L(l), L(k)]
        tri = torch.ones(L, L, dtype=torch.bool, device=z.device).tril()
        pool_mask = tri & inside[:, :, None, :]
        # Every span includes its start, so each row has one finite score when the start word
        # is real; rows of invalid spans are zeroed below.
        weights = score[:, :, None, :].masked_fill(~pool_mask, float("-inf"))
        weights = torch.softmax(weights.masked_fill(~pool_mask.any(-1, keepdim=True), 0.0), -1)
        pooled = weights @ windows  # [B, W, L, L] @ [B, W, L, H] -> [B, W, L, H]
        starts = self.start(z)[:, :, None, :].expand(B, W, L, -1)  # [B, W, L, F]
        ends = self.end(windows)  # end word of span (i, l) is window position l: [B, W, L, F]
        logits = self.classify(torch.cat([starts, ends, pooled], -1))  # [B, W, L, K]
        invalid = torch.full_like(logits[..., :1], float("-inf")).expand_as(logits).clone()
        invalid[..., NULL] = 0.0
        return torch.where(inside[..., None], logits, invalid)


def span_mask(word_mask: torch.Tensor, max_width: int) -> torch.Tensor:
    """[B, W] bool -> [B, W, L] bool: span (i, l) lies inside the sentence."""
    padded = F.pad(word_mask.bool(), (0, max_width - 1))
    return padded.unfold(1, max_width, 1).long().cumprod(-1).bool() & word_mask.bool()[..., None]


def span_targets(entities: list[list[tuple[int, int, int]]], num_words: int,
                 max_width: int) -> torch.Tensor:
    """Gold labels [B, W, L] from entities (start word, end word inclusive, type id >= 1).

    Entities longer than max_width have no span to live in and are left out (count them with
    `too_long`); everything else is NULL.
    """
    target = torch.zeros(len(entities), num_words, max_width, dtype=torch.long)
    for b, ents in enumerate(entities):
        for start, end, type_id in ents:
            if end - start < max_width:
                target[b, start, end - start] = type_id
    return target


def too_long(entities: list[list[tuple[int, int, int]]], max_width: int) -> int:
    return sum(end - start >= max_width for ents in entities for start, end, _ in ents)


def span_loss(logits: torch.Tensor, target: torch.Tensor, word_mask: torch.Tensor,
              null_weight: float = 1.0) -> torch.Tensor:
    """Weighted mean cross-entropy over the spans inside each sentence.

    Nearly every span is NULL (a 20-word sentence has ~150 spans for one or two entities);
    `null_weight` < 1 lets the few entity spans count for more, so the head learns them sooner.
    The NULL margin tuned on dev then restores precision.
    """
    inside = span_mask(word_mask, logits.shape[2])
    if not inside.any():  # a batch of sentences without words: nothing to learn, no NaN
        return logits.sum() * 0.0
    weight = None
    if null_weight != 1.0:
        weight = torch.ones(logits.shape[-1], device=logits.device, dtype=logits.dtype)
        weight[NULL] = null_weight
    return F.cross_entropy(logits[inside], target[inside], weight=weight)


def decode_spans(logits: torch.Tensor, word_mask: torch.Tensor, margin: float = 0.0,
                 nested: bool = True) -> list[list[tuple[int, int, int, float]]]:
    """Entities (start word, end word inclusive, type id, score) per sentence.

    A span is an entity when its best type's log-probability beats NULL's by more than `margin`
    (margin 0 is plain argmax). With `nested=False` overlapping candidates are resolved greedily,
    highest score first, which suits flat annotation such as CoNLL.
    """
    L = logits.shape[2]
    logp = torch.log_softmax(logits.float(), -1)
    best, types = logp[..., 1:].max(-1)  # [B, W, L]
    score = best - logp[..., NULL]
    keep = (score > margin) & span_mask(word_mask, L)
    out: list[list[tuple[int, int, int, float]]] = [[] for _ in range(logits.shape[0])]
    b_idx, i_idx, l_idx = keep.nonzero(as_tuple=True)
    found = zip(b_idx.tolist(), i_idx.tolist(), l_idx.tolist(),
                (types[keep] + 1).tolist(), score[keep].tolist())
    for b, i, l, t, s in found:
        out[b].append((i, i + l, t, s))
    if not nested:
        out = [_non_overlapping(spans) for spans in out]
    return [sorted(spans) for spans in out]


def _non_overlapping(spans: list[tuple[int, int, int, float]]) -> list[tuple[int, int, int, float]]:
    taken: list[tuple[int, int, int, float]] = []
    for span in sorted(spans, key=lambda s: -s[3]):
        if all(span[1] < t[0] or span[0] > t[1] for t in taken):
            taken.append(span)
    return taken


def span_margins(logits: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
    """Every in-sentence span's (best type minus NULL) log-probability margin, flattened: the
    candidates a margin threshold is tuned over."""
    logp = torch.log_softmax(logits.float(), -1)
    return (logp[..., 1:].max(-1).values - logp[..., NULL])[span_mask(word_mask, logits.shape[2])]


__all__ = ["NULL", "SpanSentence", "gold_spans", "read_span_jsonl", "SpanHead", "span_mask", "span_targets", "too_long", "span_loss",
           "decode_spans", "span_margins"]
