"""Model inputs shared by every task, by training and by prediction: the `Item` an example
becomes, padding items into [B, T] tensors, word-split sentences as subword pieces, and
batches of similar lengths.

A task's `encode` makes the items and its `collate` adds its targets to `pad_inputs`; training
(recipe.EpochBatches) and prediction (predict.run_model) batch them with `length_batches`, so a
model sees the same inputs in training and in use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from bertkit.text.tokenizer import check_fits, check_pairs, cut_warning
from bertkit.text.windows import Windows, split, windowed_span


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
    """What the loss learns: a class id, a float, a multi-hot list, piece label ids, ..."""
    extra: object = None
    """What a task needs to decode the item's output (QA: its window and context offsets)."""
    cut: bool = False
    """The example was longer than the task's max_length and lost its end to fit."""
    case_ids: list[int] | None = None
    """Per piece, the letter case of its word (`word_case`; 0 on specials), for a task
    with the word-case feature."""


def pad_inputs(items: Sequence[Item]) -> dict:
    """input_ids, token_type_ids, attention_mask [B, T] padded to the longest item, and
    word_ids [B, T] (-1 on specials and padding) when the items have them."""
    B, T = len(items), max(len(it.ids) for it in items)
    ids = np.zeros((B, T), dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    for row, it in enumerate(items):
        n = len(it.ids)
        ids[row, :n], types[row, :n], mask[row, :n] = it.ids, it.type_ids, 1
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
             "attention_mask": torch.from_numpy(mask)}
    if items[0].word_ids is not None:
        word_ids = np.full((B, T), -1, dtype=np.int64)
        for row, it in enumerate(items):
            word_ids[row, :len(it.word_ids)] = it.word_ids
        batch["word_ids"] = torch.from_numpy(word_ids)
    if items[0].case_ids is not None:
        case_ids = np.zeros((B, T), dtype=np.int64)
        for row, it in enumerate(items):
            case_ids[row, :len(it.case_ids)] = it.case_ids
        batch["case_ids"] = torch.from_numpy(case_ids)
    return batch


def encode_words(tokenizer, sentences: Sequence, max_length: int) -> list[tuple]:
    """(encoding, word_ids with -1 for specials) of word-split sentences (`.tokens`), cut to
    `max_length` (`words_cut` says which lost words)."""
    enc = tokenizer.encode_batch([s.tokens for s in sentences], max_length=max_length,
                                 truncation="longest_first", is_split_into_words=True)
    return [(e, [-1 if w is None else w for w in e.word_ids]) for e in enc]


# A lowercasing tokenizer gives "Paris" and "paris" the same pieces, yet the capital is most of
# what tells a name from a word (in WNUT-16's training tweets 82% of entity words are
# capitalised, 19% of the rest). The tagging tasks give it back as an input of their own.
WORD_CASES = ("special", "lower", "Capitalised", "UPPER", "mIxed", "no letters")
"""The letter case of a word, by id (0: [CLS], [SEP] and padding)."""


def word_case(word: str) -> int:
    """The id in WORD_CASES of `word`'s letter case ("I" and "A" are Capitalised)."""
    letters = [c for c in word if c.isalpha()]
    if not letters:
        return 5
    upper = [c.isupper() for c in letters]
    if not any(upper):
        return 1
    if all(upper):
        return 3 if len(letters) > 1 else 2
    return 2 if upper[0] and not any(upper[1:]) else 4


def piece_cases(words: Sequence[str], word_ids: Sequence[int]) -> list[int]:
    """Per piece, the case id of its word (word_ids: -1 on specials, which get 0)."""
    cases = [word_case(w) for w in words]
    return [0 if w < 0 else cases[w] for w in word_ids]


def words_cut(sentence, word_ids: Sequence[int]) -> bool:
    """Whether the encoding (its word ids) lost the sentence's last words."""
    return max(word_ids, default=-1) + 1 < len(sentence.tokens)


def warn_cut(items: Sequence[Item], examples: int, max_length: int, where=None) -> None:
    """The one line that says how many of `examples` were cut to max_length (a command's
    policy for over-long texts: cut, as transformers' pipelines do, and say so once)."""
    cut = len({it.example for it in items if it.cut})
    cut_warning(cut, examples, max_length, where=where and str(where), stacklevel=3)


def check_fit(items: Sequence[Item], tokenizer, config, where) -> None:
    """UserError naming `where` (the model) when the inputs cannot go through a model of
    `config`: the tokenizer is larger than its vocabulary, or the items hold sentence pairs
    and the model has one segment type."""
    check_fits(tokenizer, config, where)
    if any(any(it.type_ids) for it in items):
        check_pairs(config, where)


def window_items(items: Sequence[Item], max_length: int
                 ) -> tuple[list[Item], list[Windows | None]]:
    """The items longer than `max_length` split into windows (`bertkit.text.windows`): every
    item's windows (an item that fits: itself) in order, and per item its Windows (None where
    it fits). UserError naming the example whose first text leaves no room."""
    out, splits = [], []
    for it in items:
        if len(it.ids) <= max_length:
            out.append(it)
            splits.append(None)
            continue
        w = split(len(it.ids), windowed_span(it.type_ids), max_length, f"example {it.example + 1}")
        out += [Item(it.example, _take(it.ids, held), _take(it.type_ids, held),
                     _window_words(it.word_ids, held), None, it.extra, False,
                     _take(it.case_ids, held)) for held in w.positions]
        splits.append(w)
    return out, splits


def pool_window_outputs(outputs: Sequence, items: Sequence[Item],
                        splits: Sequence[Windows | None], pool) -> list:
    """Per item of `window_items`, its output: its own, or `pool(its windows' outputs,
    its Windows, the item)`."""
    pooled, k = [], 0
    for it, w in zip(items, splits):
        n = 1 if w is None else len(w.positions)
        pooled.append(outputs[k] if w is None else pool(outputs[k:k + n], w, it))
        k += n
    return pooled


def first_window_word(word_ids: Sequence[int], held: np.ndarray) -> int:
    """The first word a window (the positions `held` of an item) holds a piece of: a window
    numbers its words from it, as an input of its own would."""
    words = np.asarray(word_ids)[held]
    return int(words[words >= 0].min(initial=0))


def word_windows(word_ids: Sequence[int], windows: Windows) -> np.ndarray:
    """[words] per word of an item, the window where its first piece is most central: the
    window its label is read from."""
    words = np.asarray(word_ids)
    found, first = np.unique(words, return_index=True)
    return windows.owner[first[found >= 0]]


def _window_words(word_ids: list[int] | None, held: np.ndarray) -> list[int] | None:
    if word_ids is None:
        return None
    words = np.asarray(word_ids)[held]
    return np.where(words >= 0, words - first_window_word(word_ids, held), -1).tolist()


def _take(values: list[int] | None, held: np.ndarray) -> list[int] | None:
    return None if values is None else np.asarray(values)[held].tolist()


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


__all__ = ["Item", "pad_inputs", "encode_words", "WORD_CASES", "word_case", "piece_cases",
           "words_cut", "warn_cut", "check_fit", "length_batches", "window_items",
           "pool_window_outputs", "first_window_word", "word_windows"]
