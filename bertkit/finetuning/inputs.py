"""Task examples as model inputs: tokenized items with their targets, and padded batches.

`encode_texts` (classification, pairs, regression, multi-label), `encode_sentences` (tags or
entity spans over word-split sentences) and `encode_questions` (QA windows) turn read examples
into `Item`s; `collate` pads a list of items into [B, T] tensors plus the task's targets;
`length_batches` groups items of similar length. Fine-tuning (finetune.py) and prediction
(predict.py) share them, so a model sees the same inputs in training and in use.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from bertkit.finetuning import qa
from bertkit.finetuning import spans
from bertkit.finetuning.tagging import align_labels
from bertkit.model.heads import IGNORE_INDEX
from bertkit.finetuning.readers import QAExample, TaggedSentence, TextExample


@dataclass
class Item:
    """One model input (a QA example gives one per window)."""
    example: int
    """Index of the example it came from."""
    ids: list[int]
    type_ids: list[int]
    word_ids: list[int] | None = None
    """Word index per token, -1 for specials (tagging and spans)."""
    target: object = None
    """Class id, float, multi-hot list, piece label ids, (start, end) or entity spans."""
    window: qa.Window | None = None


# Encoding ---------------------------------------------------------------------------------------

def _word_ids(encoding_word_ids) -> list[int]:
    return [-1 if w is None else w for w in encoding_word_ids]


def encode_texts(tokenizer, examples: Sequence[TextExample], task: dict) -> list[Item]:
    kind, labels = task.get("label_kind", "single"), task.get("labels") or []
    index = {name: i for i, name in enumerate(labels)}
    pairs = [ex.pair for ex in examples] if any(ex.pair is not None for ex in examples) \
        else None
    enc = tokenizer.encode_batch([ex.text for ex in examples], pairs,
                                 max_length=task["max_length"], truncation="longest_first",
                                 with_offsets=False)
    items = []
    for i, (ex, e) in enumerate(zip(examples, enc)):
        target = None
        if ex.label is not None:
            if kind == "float":
                target = float(ex.label)
            elif kind == "multi":
                target = [float(name in ex.label) for name in labels]
            else:
                target = index.get(ex.label)
        items.append(Item(i, e.ids, e.type_ids, target=target))
    return items


def encode_sentences(tokenizer, sentences: Sequence[TaggedSentence], task: dict) -> list[Item]:
    """Word-split sentences; piece labels aligned per task['alignment'] when tags are known."""
    enc = tokenizer.encode_batch([s.tokens for s in sentences], max_length=task["max_length"],
                                 truncation="longest_first", is_split_into_words=True)
    labels = task["labels"]
    index = {name: i for i, name in enumerate(labels)}
    items, cut = [], 0
    for i, (s, e) in enumerate(zip(sentences, enc)):
        word_ids = _word_ids(e.word_ids)
        cut += max(word_ids, default=-1) + 1 < len(s.tokens)
        target = None
        if s.tags and task["task"] == "tag":
            target = align_labels(e.word_ids, s.tags, index, task.get("alignment", "copy"))
        elif task["task"] == "spans" and (s.tags or getattr(s, "spans", None)):
            kept = max(word_ids, default=-1) + 1
            types = {name: k + 1 for k, name in enumerate(labels)}
            target = [(a, b - 1, types[t]) for a, b, t in spans.gold_spans(s)
                      if b <= kept and t in types]
        items.append(Item(i, e.ids, e.type_ids, word_ids, target))
    if cut:
        warnings.warn(f"{cut} of {len(sentences)} sentences are longer than max_length "
                      f"{task['max_length']} tokens; their last words are not seen", stacklevel=2)
    return items


def encode_questions(tokenizer, examples: Sequence[QAExample], task: dict, *,
                     training: bool = False, skip_no_room: bool | None = None
                     ) -> tuple[list[Item], list[list[tuple[int, int]]]]:
    """QA windows as items (see qa.question_windows), and each context's token offsets."""
    windows, offsets = qa.question_windows(tokenizer, examples, task, training=training,
                                           skip_no_room=skip_no_room)
    return [Item(w.example, w.input_ids, w.token_type_ids, target=target, window=w)
            for w, target in windows], offsets


# Batching ---------------------------------------------------------------------------------------

def collate(items: Sequence[Item], task: dict) -> dict:
    """Pad a list of items to the longest: [B, T] tensors plus the task's targets."""
    B, T = len(items), max(len(it.ids) for it in items)
    ids = np.zeros((B, T), dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    for row, it in enumerate(items):
        n = len(it.ids)
        ids[row, :n], types[row, :n], mask[row, :n] = it.ids, it.type_ids, 1
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
             "attention_mask": torch.from_numpy(mask)}
    name = task["task"]
    if items[0].word_ids is not None:
        word_ids = np.full((B, T), -1, dtype=np.int64)
        for row, it in enumerate(items):
            word_ids[row, :len(it.word_ids)] = it.word_ids
        batch["word_ids"] = torch.from_numpy(word_ids)
    if items[0].target is None:
        return batch
    if name == "tag":
        labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
        for row, it in enumerate(items):
            labels[row, :len(it.target)] = it.target
        batch["labels"] = torch.from_numpy(labels)
    elif name == "qa":
        batch["start_positions"] = torch.tensor([it.target[0] for it in items])
        batch["end_positions"] = torch.tensor([it.target[1] for it in items])
    elif name == "spans":
        W = int(batch["word_ids"].max()) + 1
        batch["span_target"] = spans.span_targets([it.target for it in items], max(W, 0),
                                                  task["head"]["max_width"])
    elif task.get("label_kind") == "float":
        batch["labels"] = torch.tensor([it.target for it in items], dtype=torch.float32)
    elif task.get("label_kind") == "multi":
        batch["labels"] = torch.tensor([it.target for it in items], dtype=torch.float32)
    else:
        batch["labels"] = torch.tensor([it.target for it in items], dtype=torch.long)
    return batch


def length_batches(lengths: Sequence[int], batch_size: int,
                   generator: torch.Generator | None = None) -> list[list[int]]:
    """Index batches of similar lengths. With a generator (training): shuffle, sort by length
    inside chunks of 50 batches, and shuffle the batch order, so batches stay random but pad
    little. Without: sorted by length, longest first."""
    n = len(lengths)
    lengths = np.asarray(lengths)
    if generator is None:
        order = np.argsort(-lengths, kind="stable")
        return [order[i:i + batch_size].tolist() for i in range(0, n, batch_size)]
    perm = torch.randperm(n, generator=generator).numpy()
    chunk = 50 * batch_size
    out = []
    for lo in range(0, n, chunk):
        part = perm[lo:lo + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        out += [part[i:i + batch_size].tolist() for i in range(0, len(part), batch_size)]
    return [out[i] for i in torch.randperm(len(out), generator=generator).tolist()]


__all__ = ["Item", "encode_texts", "encode_sentences", "encode_questions", "collate",
           "length_batches"]
