"""Local attention at the cost of its window: each query attends to the keys within
window // 2 of it, computed block by block, O(T x window) in time and memory instead of the
O(T^2) of a dense [T, T] mask (ModernBERT's local layers: a 128-token window at 8,192 tokens
would otherwise compute 64 times the scores it keeps).

The sequence is cut into blocks of b = window // 2 tokens (the last one padded). Every key a
query may see then lies in its own block or the next one either side, so each block of b
queries attends to one stretch of 3b keys (2b left to right: the block before and its own),
a [B, A, T/b, b, 3b] computation masked exactly to the band |i - j| <= window // 2, to the
keys that exist and are not padding, and left of the diagonal when causal. A query with no key
at all (padding whose neighbourhood is all padding) gives 0, as SDPA does with the dense mask.

`Band` is the mask left unbuilt; `fast.Attend` hands it to `local_attention`, which the
encoder's speed switch uses where it pays (`fast.blocks_pay`); the dense mask of
`encoder.build_attention_mask` stays the reference (tests/model/test_local_attention.py).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class Band(NamedTuple):
    """A local layer's attention mask, not built: `encoder.build_attention_mask(padding, T,
    causal, device, window)` spelled as what it is made of."""

    padding: torch.Tensor | None
    """[B, T] True (or 1) at the tokens that may be attended to; None: all of them."""
    window: int
    """Each token sees the tokens within window // 2 of its own."""
    documents: torch.Tensor | None = None
    """[B, T] the document of each token of a packed row: each sees its own document's only;
    None: one document a row."""


def key_blocks(x: torch.Tensor, b: int, before: int, after: int) -> torch.Tensor:
    """x [..., T, D] cut into stretches, one per block of b queries: [..., n, W, D],
    n = ceil(T / b) blocks, W = (before + 1 + after) x b positions: the block itself, `before`
    blocks to its left and `after` to its right, zeros beyond either end. A view of one padded
    copy of x (the stretches overlap)."""
    T = x.shape[-2]
    n = -(-T // b)
    padded = F.pad(x, (0, 0, before * b, (n + after) * b - T))
    return padded.unfold(-2, (before + 1 + after) * b, b).transpose(-1, -2)


def band_mask(padding: torch.Tensor | None, T: int, window: int, b: int, causal: bool,
              device: torch.device, documents: torch.Tensor | None = None) -> torch.Tensor:
    """Which key of each stretch of `key_blocks` each query may see: [B or 1, n, b, W],
    True inside the band |i - j| <= window // 2 (and j <= i when causal), at keys that exist
    and are not padding (and of the query's document, given `documents` [B, T])."""
    before, after = 1, 0 if causal else 1
    r = torch.arange(b, device=device)[:, None]  # [b, 1] query within its block
    c = torch.arange((before + 1 + after) * b, device=device)[None, :]  # [1, W] key in its stretch
    offset = c - before * b - r  # [b, W] key position - query position
    near = offset.abs() <= window // 2
    if causal:
        near = near & (offset <= 0)
    keys = (torch.ones(1, T, dtype=torch.bool, device=device) if padding is None
            else padding.bool())  # [B, T]
    keys = key_blocks(keys[:, :, None], b, before, after)[..., 0]  # [B, n, W], False beyond T
    mask = near & keys[:, :, None, :]  # [B, n, b, W]
    if documents is None:
        return mask
    of_query = key_blocks(documents[:, :, None], b, 0, 0)[..., 0]  # [B, n, b]
    of_key = key_blocks(documents[:, :, None], b, before, after)[..., 0]  # [B, n, W]
    return mask & (of_query[..., :, None] == of_key[..., None, :])  # [B, n, b, W]


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    padding: torch.Tensor | None, window: int, causal: bool,
                    dropout_p: float = 0.0, documents: torch.Tensor | None = None
                    ) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v under the mask `Band(padding, window, documents)`
    (and causal), block by block, dropout on the weights; q, k, v: [B, A, T, D] ->
    [B, A, T, D].

    Each block is one SDPA call's query rows (the fused kernels of the device, which never
    keep the [b, W] weights for the backward pass): [A, B x n, b, D] against [A, B x n, W, D],
    heads first so that one mask [1, B x n, b, W] serves every head."""
    B, A, T, D = q.shape
    b = max(1, window // 2)
    before, after = 1, 0 if causal else 1
    mask = band_mask(padding, T, window, b, causal, q.device, documents)  # [B or 1, n, b, W]
    n = mask.shape[1]
    # A query with no key at all may see its whole stretch instead and its output is then set
    # to 0: a row of nothing but masked keys is NaN in some of SDPA's kernels (CUDA's
    # memory-efficient one); as it is, no row reaches any kernel empty.
    seen = mask.any(-1, keepdim=True)  # [B or 1, n, b, 1]
    mask = (mask | ~seen).expand(B, -1, -1, -1).reshape(1, B * n, b, -1)  # [1, B x n, b, W]
    heads_first = [t.transpose(0, 1) for t in (q, k, v)]  # 3 x [A, B, T, D]
    queries = key_blocks(heads_first[0], b, 0, 0).reshape(A, B * n, b, D)
    keys, values = (key_blocks(t, b, before, after).reshape(A, B * n, -1, D)
                    for t in heads_first[1:])
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask,
                                         dropout_p=dropout_p)  # [A, B x n, b, D]
    out = out.view(A, B, n, b, D) * seen[None]
    return out.reshape(A, B, n * b, D)[:, :, :T].transpose(0, 1)


__all__ = ["Band", "key_blocks", "band_mask", "local_attention"]
