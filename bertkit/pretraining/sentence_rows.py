"""Sentences as a masked LM is judged on them: encoded with [CLS] / [SEP], padded into rows,
and the model's log-probabilities at chosen masked positions of those rows (the last block
and the vocabulary projection run only there, `positions=`). Masked-token scores,
pseudo-log-likelihoods and ELECTRA's detection scores are made of these."""
from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.text.tokenizer import cut_warning, word_starts


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def max_length(model: nn.Module, tokenizer) -> int:
    """The longest input: the model's positions (every model judged here has its config)."""
    return int(model.config.max_positions)


def encode(tokenizer, texts: Sequence[str], max_length: int, truncate: bool,
            names: Sequence[str] | None = None):
    """(flat ids [P], lengths [S], is-special [P]) of the texts with [CLS] / [SEP]."""
    batch = tokenizer.encode_batch(list(texts), max_length=max_length,
                                   truncation="longest_first" if truncate else False,
                                   with_offsets=False, names=names)
    cut_warning(int(batch.cut.sum()), len(batch), max_length, stacklevel=3)
    flat, lengths = batch.flat_ids()
    special = np.isin(flat, np.fromiter(tokenizer.special_ids, dtype=np.int64))
    return flat, lengths, special


def padded(flat: np.ndarray, lengths: np.ndarray, pad_id: int) -> np.ndarray:
    """int64 [S, longest]: the texts' ids, padded."""
    real = np.arange(int(lengths.max(initial=1)))[None, :] < lengths[:, None]
    ids = np.full(real.shape, pad_id, dtype=np.int64)
    ids[real] = flat
    return ids


def masked_logits(model: nn.Module, rows: np.ndarray, lengths: np.ndarray,
                   positions: np.ndarray, mask_id: int, device: torch.device,
                   also_masked: np.ndarray | None = None, inputs: np.ndarray | None = None):
    """rows [C, T] of ids (lengths [C] real tokens), positions [N] flat indices into C*T:
    (log-probabilities over the vocabulary [N, V] at those positions, their original ids [N]),
    with [MASK] put at every position (or the ids `inputs` [N] there) and at the flat indices
    `also_masked`, which are not predicted."""
    ids = torch.from_numpy(rows).to(device)
    attention = (torch.arange(rows.shape[1])[None, :] < torch.from_numpy(lengths)[:, None])
    pos = torch.from_numpy(positions).to(device)
    targets = ids.flatten()[pos]
    if inputs is None:
        ids = ids.flatten().index_fill(0, pos, mask_id)
    else:
        ids = ids.flatten().index_copy(0, pos, torch.from_numpy(inputs).to(device))
    if also_masked is not None and len(also_masked):
        ids = ids.index_fill(0, torch.from_numpy(also_masked).to(device), mask_id)
    ids = ids.view(rows.shape)
    logits = model(ids, torch.zeros_like(ids), attention.long().to(device), positions=pos)[0]
    return F.log_softmax(logits.float(), dim=-1), targets


def word_begins(tokenizer, flat: np.ndarray, special: np.ndarray) -> np.ndarray:
    """bool [P]: the non-special piece begins a word (`word_starts`, or it follows a special
    token); a word is such a piece and the pieces after it."""
    return (word_starts(tokenizer)[flat] | np.roll(special, 1)) & ~special


__all__ = ["word_begins", "eval_mode", "max_length", "encode", "padded", "masked_logits"]
