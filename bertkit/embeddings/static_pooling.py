"""Sentence vectors of a static model (`bertkit static distill`, model2vec's layout) without
the transformer's machinery: the mean of a text's known pieces' vectors, one call per batch.

The Embedder reads a static directory through the encoder's interface (a lookup standing in for
the layers), which is exact but pays for what a lookup does not need: offsets and word ids of
every piece, batches sorted and padded, a thread per batch. Here, as in model2vec's `encode`,
the tokenizer cuts the texts without its template (`encode_batch_fast`, in Rust, in parallel),
the ids are flattened into one array with each text's start, and `embedding_bag` averages
them. The vectors are those of the general path: the same pieces, [UNK] left out, a text cut
to the model's maximum length less its [CLS] and [SEP], a text of no known piece zeros.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.files import UserError
from bertkit.model.static_encoder import NO_LIMIT
from bertkit.text.tokenizer import Tokenizer, cut_warning

TEMPLATE = 2
"""[CLS] and [SEP]: the positions the Embedder's maximum length counts beside the pieces."""


def bag_means(table: torch.Tensor, ids: np.ndarray, starts: np.ndarray) -> torch.Tensor:
    """[N, D] the mean of `table`'s rows `ids[starts[i]:starts[i + 1]]` for each text i (a
    text of none: zeros). `starts` has N + 1 entries, the last len(ids)."""
    offsets = torch.from_numpy(starts[:-1]).to(table.device)
    return F.embedding_bag(torch.from_numpy(ids).to(table.device), table, offsets, mode="mean")


def known_pieces(pieces: Sequence[Sequence[int]], unk_id: int | None,
                 limit: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Each text's ids cut to `limit` (None: whole), [UNK] then left out, flattened: the ids,
    each text's start (and the end) in them, and how many texts were cut."""
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    cut = 0 if limit is None else int((lengths > limit).sum())
    if cut:
        pieces = [p[:limit] for p in pieces]
        lengths = np.minimum(lengths, limit)
    flat = np.fromiter((i for p in pieces for i in p), dtype=np.int64, count=int(lengths.sum()))
    keep = flat != (-1 if unk_id is None else unk_id)
    text_of = np.repeat(np.arange(len(pieces)), lengths)
    counts = np.bincount(text_of[keep], minlength=len(pieces))
    return flat[keep], np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), cut


def static_sentences(table: torch.Tensor, tokenizer: Tokenizer, texts: Sequence[str],
                     max_length: int, truncation: bool = True, lowercase: bool = False,
                     chunk: int = 8192) -> np.ndarray:
    """[N, D] float32 sentence vectors of `texts` by the static `table` (not normalized):
    the mean of each text's known pieces, as the Embedder's `known_pieces_only` pooling gives
    them. Texts longer than `max_length` tokens (with [CLS] and [SEP]) are cut, and one
    warning counts them, or with `truncation=False` refused (UserError naming the input).
    In chunks of `chunk` texts, so that the pieces of a large input never all exist at once."""
    limit = max_length - TEMPLATE if max_length - TEMPLATE < NO_LIMIT else None
    out = np.empty((len(texts), table.shape[1]), dtype=np.float32)
    cut = 0
    with torch.inference_mode():
        for start in range(0, len(texts), chunk):
            part = [t.lower() if lowercase else t for t in texts[start:start + chunk]]
            pieces = [e.ids for e in
                      tokenizer.backend.encode_batch_fast(part, add_special_tokens=False)]
            if not truncation:
                _refuse_long(pieces, limit, max_length, start)
            ids, starts, n = known_pieces(pieces, tokenizer.unk_id, limit)
            out[start:start + len(part)] = bag_means(table, ids, starts).float().cpu().numpy()
            cut += n
    cut_warning(cut, len(texts), max_length, stacklevel=3)
    return out


def _refuse_long(pieces: Sequence[Sequence[int]], limit: int | None, max_length: int,
                 first: int) -> None:
    """The Embedder's error for the first text over `limit` pieces (numbered from `first`)."""
    for i, p in enumerate(pieces):
        if limit is not None and len(p) > limit:
            raise UserError(f"input {first + i + 1}: {len(p) + TEMPLATE} tokens, longer than "
                            f"max_length {max_length} (truncation is off)")


def encoded_pieces(encoded: Sequence, unk_id: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The known pieces of texts the Embedder tokenized (`Encoded`, whose [CLS] and [SEP]
    have word id -1), flattened: the ids and each text's start (and the end) in them."""
    known = [e.ids[(e.word_ids >= 0) & (e.ids != (-1 if unk_id is None else unk_id))]
             for e in encoded]
    starts = np.concatenate([[0], np.cumsum([len(k) for k in known], dtype=np.int64)])
    ids = np.concatenate(known) if known else np.zeros(0, dtype=np.int64)
    return ids.astype(np.int64), starts.astype(np.int64)


def encoded_means(table: torch.Tensor, encoded: Sequence, unk_id: int | None,
                  out: np.ndarray | None = None) -> np.ndarray:
    """[N, D] the mean of the known pieces of each text the Embedder tokenized, written into
    `out` when given (not normalized)."""
    with torch.inference_mode():
        vectors = bag_means(table, *encoded_pieces(encoded, unk_id)).float().cpu().numpy()
    if out is None:
        return vectors
    out[:] = vectors
    return out


__all__ = ["bag_means", "known_pieces", "static_sentences", "encoded_pieces", "encoded_means",
           "TEMPLATE"]
