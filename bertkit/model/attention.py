"""Attention weights, for looking inside a model: who attends to whom, in every block.

The encoder's forward pass never materialises its attention weights (SDPA fuses the softmax
into the product with the values), so they are re-derived here by running the same blocks
step by step: each block's input, its pre-attention norm ("modern"), its q/k projection, the
rotary turn and the block's mask (padding, a local window) give exactly the probabilities
that block used. Checked against transformers' `output_attentions` (eager attention) for
both architectures.

Also the summary the textbooks draw of what heads do (Clark et al. 2019, "What does
BERT look at?"): the share of each head's attention that goes to [CLS], to [SEP], to the
previous and the next token, and to the token itself.
"""
from __future__ import annotations

import torch

from bertkit.model.encoder import Encoder


@torch.inference_mode()
def attention_weights(encoder: Encoder, input_ids: torch.Tensor,
                      token_type_ids: torch.Tensor | None = None,
                      attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The attention probabilities of every block: [L, B, A, T, T], row = query, column = key,
    each row of a real token summing to 1 (padded keys get 0), in fp32."""
    x = encoder.embed(input_ids, token_type_ids)  # [B, T, H]
    B, T, H = x.shape
    causal = encoder.config.causal  # a left-to-right model's maps are triangular
    # the dense masks: the blocked path's `Band` gives no [T, T] mask to fill the scores by
    inputs = encoder.layer_inputs(attention_mask, T, causal, x.device, blocked=False)
    weights = []
    for block, (mask, rope) in zip(encoder.blocks, inputs):
        attn = block.attn
        q, k, _ = attn.project(block.attn_norm(x) if block.pre_norm else x, rope)  # [B, A, T, D]
        scale = (H // attn.num_heads) ** -0.5
        scores = (q.float() @ k.float().transpose(-1, -2)) * scale  # [B, A, T, T]
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        # a padded query whose local window holds only padding has no key at all: 0, not NaN
        weights.append(scores.softmax(-1).nan_to_num(0.0))
        x = block(x, mask, causal, rope)
    return torch.stack(weights)  # [L, B, A, T, T]


HEAD_TARGETS = ("cls", "sep", "previous", "next", "self")
"""What `head_summary` measures, per head: the share of attention each query gives them."""


def head_summary(weights: torch.Tensor, ids: torch.Tensor, cls_id: int,
                 sep_id: int) -> dict[str, torch.Tensor]:
    """For one text's weights [L, A, T, T] and its ids [T]: {target: [L, A]}, the mean over
    query tokens of the attention given to [CLS] tokens, [SEP] tokens, the token just before,
    the token just after and the token itself (the first token has no previous one and the
    last no next one: those rows count 0, as in Clark et al.)."""
    T = weights.shape[-1]
    w = weights.float()

    def diagonal(offset: int) -> torch.Tensor:  # [L, A]: the mean over all T queries
        return w.diagonal(offset, dim1=-2, dim2=-1).sum(-1) / T

    return {"cls": (w @ (ids == cls_id).float()).mean(-1),
            "sep": (w @ (ids == sep_id).float()).mean(-1),
            "previous": diagonal(-1), "next": diagonal(1), "self": diagonal(0)}


__all__ = ["attention_weights", "HEAD_TARGETS", "head_summary"]
