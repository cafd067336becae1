"""Span-based NER (Jurafsky & Martin's 11.5.2): every word span up to L words is classified as one of the
entity types or NULL. The task reads CoNLL (entities from the tags) or JSON lines with nested
entities, and the model is the encoder with a span head, saved as a plain BertModel plus
task_head.safetensors.

Spans are over words, not subwords: word i is represented by the encoder output z_i of its first
subword. A span (i, j) is [FFN_start(z_i); FFN_end(z_j); g_ij] where g_ij is self-attention
pooling over z_i..z_j (a learned score per token, softmax inside the span). A softmax over
NULL + types scores each span, so nested entities come out naturally; a NULL margin trades
recall for precision.

Shapes: B batch, W words, L longest span, H hidden, F span-FFN width, K types + 1 (NULL = 0).
Span (i, l) starts at word i and holds l + 1 words.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.files import UserError, read_jsonl
from bertkit.finetuning import distillation, metrics
from bertkit.finetuning.heads import Parts, TaskHead, first_subword_index, head_dropout
from bertkit.finetuning.inputs import (Item, encode_words, first_window_word, pad_inputs,
                                      word_windows, words_cut)
from bertkit.finetuning.readers import detect_format, holds_tags, read_tagged
from bertkit.finetuning.task import fitted, model_inputs
from bertkit.finetuning.tagging import spans_to_tags, tags_to_spans
from bertkit.finetuning.tasks.tag import WordTask
from bertkit.model.encoder import Encoder

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
        windows = _windows(z, L)  # [B, W, L, H]: windows[b, i, k] = z[b, i + k]
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
        # [K] 0 for NULL, -inf for every type (not written in place: ONNX export cannot trace that)
        kinds = torch.arange(logits.shape[-1], device=z.device)
        invalid = torch.where(kinds == NULL, 0.0, float("-inf")).to(logits.dtype)
        return torch.where(inside[..., None], logits, invalid)


def _windows(x: torch.Tensor, width: int) -> torch.Tensor:
    """[B, W, ...] -> [B, W, width, ...]: out[b, i, k] = x[b, i + k], zero past the end.
    Shifted slices rather than `unfold`, which ONNX export refuses when W is dynamic."""
    W = x.shape[1]
    padded = torch.cat([x, x.new_zeros(x.shape[0], width - 1, *x.shape[2:])], 1)
    return torch.stack([padded[:, k:k + W] for k in range(width)], 2)


def span_mask(word_mask: torch.Tensor, max_width: int) -> torch.Tensor:
    """[B, W] bool -> [B, W, L] bool: span (i, l) lies inside the sentence (all its l + 1
    words are real)."""
    real = _windows(word_mask.long(), max_width).cumsum(-1)  # [B, W, L] real words in i..i+l
    # a count, not a cumulative product: ONNX has CumSum and no CumProd, so the graph exports
    return real == torch.arange(1, max_width + 1, device=word_mask.device)


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
    inside = span_mask(word_mask, logits.shape[2])  # [B, W, L]
    # Weights, not boolean indexing: selecting the inside spans would wait for the device
    # (their count sets the shape), and a batch with none gives 0, not 0 / 0.
    weight = inside.float()
    if null_weight != 1.0:
        weight = weight * torch.where(target == NULL, null_weight, 1.0)
    per_span = F.cross_entropy(logits.flatten(0, 2).float(), target.flatten(),
                               reduction="none")  # [B * W * L]
    return (per_span * weight.flatten()).sum() / weight.sum().clamp(min=1e-12)


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


class SpanTagger(TaskHead):
    """Encoder + span head over word spans; exported as a plain BertModel."""

    architecture = "BertModel"
    uses_pooler = True

    def __init__(self, encoder: Encoder, num_types: int, max_width: int = 8,
                 ffn_size: int = 150, parts: Parts | None = None):
        super().__init__(encoder, parts)
        self.span_head = SpanHead(encoder.config.hidden_size, num_types, max_width, ffn_size,
                                  head_dropout(encoder))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, *,
                word_ids: torch.Tensor, num_words: int | None = None,
                case_ids: torch.Tensor | None = None):
        """Span logits [B, W, L, K] and the word mask [B, W]. `num_words` (W) is known on the
        host where the batch was built; without it, it is read from `word_ids`, which waits
        for the device. `case_ids` [B, T]: TaskHead.token_states."""
        if num_words is None:
            num_words = int(word_ids.max()) + 1 if word_ids.numel() else 0
        # At least one word column, so that a batch of sentences with no pieces still has shape.
        num_words = max(1, num_words)
        index, mask = first_subword_index(word_ids, num_words)
        return self.score_words(input_ids, token_type_ids, attention_mask, index, mask,
                                case_ids), mask

    def score_words(self, input_ids, token_type_ids, attention_mask, word_index: torch.Tensor,
                    word_mask: torch.Tensor, case_ids: torch.Tensor | None = None
                    ) -> torch.Tensor:
        """Span logits [B, W, L, K] from each word's first piece [B, W] and which words are
        real [B, W]: the part with no data-dependent shape, which ONNX export traces."""
        h = self.token_states(input_ids, token_type_ids, attention_mask, case_ids)
        z = h.gather(1, word_index[..., None].expand(-1, -1, h.shape[-1]))  # [B, W, H]
        return self.span_head(z, word_mask.bool())

    def head_spec(self) -> dict:
        head = self.span_head
        return {"kind": "spans", "num_labels": head.num_types, "max_width": head.max_width,
                "ffn_size": head.start[0].out_features}


# The task -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spans(WordTask):
    """Entities as word spans, nested or not; its labels are the entity types."""
    name: ClassVar[str] = "spans"
    reads_windows: ClassVar[bool | None] = True

    nested: bool = fitted(False)
    """Whether training has overlapping entities (else overlapping candidates are resolved)."""
    max_width: int = field(default=8, metadata={"flag": "max_span_width"})
    """Longest entity in words."""
    ffn_size: int = field(default=150, metadata={"flag": "span_ffn"})
    """Width of the start / end FFNs and of the classifier's hidden layer."""
    null_weight: float = field(default=0.25, metadata={"flag": "span_null_weight"})
    """Weight of NULL spans in the loss (entity spans weigh 1)."""
    span_margin: float = fitted(0.0)
    """An entity's log-probability must beat NULL's by this much (tuned on dev)."""

    @classmethod
    def from_json(cls, data: dict) -> "Spans":
        head = data.get("head", {})
        return dataclasses.replace(super().from_json(data),
                                   **{k: head[k] for k in ("max_width", "ffn_size") if k in head})

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list:
        if detect_format(path) == "jsonl" and not holds_tags(path):
            return read_span_jsonl(path)
        return read_tagged(path, self.conllu_column)  # JSON lines of BIO tags too

    def with_labels(self, train, dev) -> "Spans":
        labels = sorted({t for s in train for _, _, t in gold_spans(s)})
        if not labels:
            raise UserError("the training data has no entities")
        task = dataclasses.replace(self, labels=tuple(labels), nested=any(
            a2 < b1 and a1 < b2 for s in train
            for i, (a1, b1, _) in enumerate(gold_spans(s)) for a2, b2, _ in gold_spans(s)[i + 1:]))
        task.check(dev)
        return task

    def check(self, examples) -> None:
        unknown = [(s.source, t) for s in examples for _, _, t in gold_spans(s)
                   if t not in self.labels]
        if unknown:
            raise UserError(f"{unknown[0][0]}: unknown entity type {unknown[0][1]!r} (the "
                            f"training types are: {', '.join(self.labels)})")

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False) -> list[Item]:
        """Targets: the gold entities (start word, end word inclusive, type id >= 1) that the
        encoding keeps whole."""
        types = {name: k + 1 for k, name in enumerate(self.labels)}
        items = []
        for i, (s, (e, word_ids)) in enumerate(
                zip(examples, encode_words(tokenizer, examples, self.max_length))):
            target = None
            if isinstance(s, SpanSentence) or s.tags:  # labelled (maybe with no entity)
                kept = max(word_ids, default=-1) + 1
                target = [(a, b - 1, types[t]) for a, b, t in gold_spans(s)
                          if b <= kept and t in types]
            items.append(Item(i, e.ids, e.type_ids, word_ids, target,
                              cut=words_cut(s, word_ids), case_ids=self.case_ids(s, word_ids)))
        return items

    def collate(self, items) -> dict:
        batch = pad_inputs(items)
        if items[0].target is not None:
            W = int(batch["word_ids"].max()) + 1  # the forward's word columns
            batch["span_target"] = span_targets([it.target for it in items], max(W, 1),
                                                self.max_width)
        return batch

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder, layer_mix: bool = False) -> SpanTagger:
        return SpanTagger(encoder, len(self.labels), self.max_width, self.ffn_size,
                          self.parts(layer_mix))

    def loss(self, model, batch) -> torch.Tensor:
        target = batch["span_target"]  # [B, W, L], W counted when the batch was built
        logits, mask = model(*model_inputs(batch), word_ids=batch["word_ids"],
                             num_words=target.shape[1], case_ids=batch.get("case_ids"))
        return span_loss(logits, target, mask, self.null_weight)

    def target_count(self, batch) -> float:
        """The spans' weights that `span_loss` divides by."""
        if "span_target" not in batch:
            return batch["input_ids"].shape[0]
        target = batch["span_target"]
        _, words = first_subword_index(batch["word_ids"], target.shape[1])
        weight = span_mask(words, self.max_width).float()
        if self.null_weight != 1.0:
            weight = weight * torch.where(target == NULL, self.null_weight, 1.0)
        return float(weight.sum().clamp(min=1e-12))

    def teacher_outputs(self, model, batch, items) -> list:
        """Span logits [W, L, K] per item, over its own words."""
        logits, _ = model(*model_inputs(batch), word_ids=batch["word_ids"],
                          case_ids=batch.get("case_ids"))
        return [logits[row, :max(1, max(it.word_ids, default=-1) + 1)].float().cpu()
                for row, it in enumerate(items)]

    def taught_loss(self, model, batch, settings, project=None) -> torch.Tensor:
        """KL of each span's softened type distribution, over the spans inside a sentence."""
        teacher = batch["teacher"]  # [B, W, L, K], W the batch's words as collate counts them
        logits, mask = model(*model_inputs(batch), word_ids=batch["word_ids"],
                             num_words=teacher.shape[1], case_ids=batch.get("case_ids"))
        taught = distillation.soft_kl(logits, teacher.to(logits.device), settings.temperature,
                                      span_mask(mask, logits.shape[2]))
        labels = span_loss(logits, batch["span_target"], mask, self.null_weight) \
            if "span_target" in batch else None
        return distillation.mixed(settings.alpha, taught, labels)

    def infer(self, model, batch, items) -> list:
        """Span logits [W, L, K] and word mask [W] per item."""
        logits, wmask = model(*model_inputs(batch), word_ids=batch["word_ids"],
                              case_ids=batch.get("case_ids"))
        return [(logits[r].float().cpu(), wmask[r].cpu()) for r in range(len(items))]

    def pool_windows(self, outputs, windows, item) -> tuple[torch.Tensor, torch.Tensor]:
        """Each span's logits from the window where its first word's first piece is most
        central (a span that runs past that window's last word scores NULL there, as one past
        a sentence's end does)."""
        rows = [outputs[k][0][w - first_window_word(item.word_ids, windows.positions[k])]
                for w, k in enumerate(word_windows(item.word_ids, windows))]
        return torch.stack(rows), torch.ones(len(rows), dtype=torch.bool)

    def decode_outputs(self, outputs, items, examples
                       ) -> list[list[tuple[int, int, str, float]]]:
        """Entities (start word, end word exclusive, type, margin over NULL) per sentence."""
        out = []
        for logits, wmask in outputs:
            found = decode_spans(logits[None], wmask[None], self.span_margin, self.nested)[0]
            out.append([(s, e + 1, self.labels[t - 1], sc) for s, e, t, sc in found])
        return out

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples, predictions) -> dict:
        return metrics.span_scores([gold_spans(s) for s in examples],
                                   [[(a, b, t) for a, b, t, _ in p] for p in predictions])

    def selection(self, scores: dict) -> float:
        return scores["f1"]

    def baseline(self, train, test, start) -> dict | None:
        if not all(s.tags for s in train):
            return None  # span data has no tags to count
        return super().baseline(train, test, start)

    def tune(self, runner, dev) -> "Spans":
        """The NULL margin that maximises dev F1 (the model runs once; each margin decodes)."""
        items, outputs = runner.outputs(dev, "evaluate")
        best = (-1.0, 0.0)
        for margin in (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0):
            task = dataclasses.replace(self, span_margin=margin)
            f1 = task.score(dev, task.decode_outputs(outputs, items, dev))["f1"]
            best = max(best, (f1, -margin))
        return dataclasses.replace(self, span_margin=-best[1])

    # Use ----------------------------------------------------------------------------------------
    @property
    def marks_entities(self) -> bool:
        return True

    def entities(self, prediction):
        # the margin over NULL as a probability-like score
        return [(a, b, t, float(np.exp(-np.logaddexp(0, -s)))) for a, b, t, s in prediction]

    def word_tags(self, prediction, length: int) -> list[str]:
        """The entities in BIO; where nested ones overlap, the best-scored is kept."""
        taken = [False] * length
        kept = []
        for a, b, t, _ in sorted(prediction, key=lambda e: -e[3]):
            if not any(taken[a:b]):
                taken[a:b] = [True] * (b - a)
                kept.append((a, b, t))
        return spans_to_tags(kept, length, "BIO")


__all__ = ["NULL", "SpanSentence", "gold_spans", "read_span_jsonl", "SpanHead", "span_mask",
           "span_targets", "too_long", "span_loss", "decode_spans", "span_margins", "SpanTagger",
           "Spans"]
