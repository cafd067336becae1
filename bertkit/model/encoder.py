"""The BERT encoder, top to bottom: embeddings -> N post-LN blocks -> pooler.

Shapes: B batch, T tokens, H hidden, A heads, D = H / A head width, N selected rows.
Parameter names are bertkit's own (fused q/k/v); `hub.py` maps them to and from Hugging Face
names. The heads (masked LM, next sentence, span boundary) are in `heads.py`.

This file is the reference: nn.Dropout, F.scaled_dot_product_attention, every block on every
token. `Encoder(cfg, fast=True)` (the default) swaps in the CPU speed paths of `fast.py`, which
compute the same function; `fast=False` runs exactly what is written here.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import EncoderConfig
from bertkit.model import fast as fast_paths


def activation_fn(name: str):
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    if name == "silu":
        return F.silu
    raise ValueError(f"unknown activation {name!r}")


def make_dropout(p: float, fast: bool) -> nn.Module:
    return fast_paths.PackedDropout(p) if fast else nn.Dropout(p)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           causal: bool, dropout_p: float) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v with dropout on the weights; q, k, v: [B, A, T, D]."""
    # SDPA's own causal path cannot take a padding mask; `build_attention_mask` folds it in.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          is_causal=causal and mask is None)


class Embeddings(nn.Module):
    """Word + learned position + segment embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: EncoderConfig, fast: bool = False):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self.segment = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = make_dropout(cfg.hidden_dropout, fast)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.shape[-1]
        if T > self.position.num_embeddings:
            raise ValueError(f"input of {T} tokens is longer than the model's "
                             f"{self.position.num_embeddings} positions")
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)
        x = self.word(input_ids) + self.position(position_ids)  # [B, T, H]
        if token_type_ids is None:
            x = x + self.segment.weight[0]
        else:
            x = x + self.segment(token_type_ids)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention with one fused q/k/v projection."""

    def __init__(self, cfg: EncoderConfig, fast: bool = False):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_dropout
        self.attend = fast_paths.attend if fast else attend

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]."""
        B, T, H = x.shape
        A, D = self.num_heads, H // self.num_heads
        p = self.dropout_p if self.training else 0.0
        q, k, v = self.qkv(x).view(B, T, 3, A, D).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # 3 x [B, A, T, D]
        y = self.attend(q, k, v, mask, causal, p).transpose(1, 2).reshape(B, T, H)  # [B, T, H]
        return self.out(y)


class Block(nn.Module):
    """Post-LN transformer block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, cfg: EncoderConfig, fast: bool = False):
        super().__init__()
        self.attn = SelfAttention(cfg, fast)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.act = activation_fn(cfg.activation)
        self.dropout = make_dropout(cfg.hidden_dropout, fast)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]."""
        x = self.attn_norm(x + self.dropout(self.attn(x, mask, causal)))
        return self.feed_forward(x)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The second half, row by row: x [..., H] -> LN(x + FFN(x)) [..., H]."""
        return self.ffn_norm(x + self.dropout(self.down(self.act(self.up(x)))))


def build_attention_mask(padding: torch.Tensor | None, T: int, causal: bool,
                         device: torch.device) -> torch.Tensor | None:
    """Boolean SDPA mask (True = may attend) from a [B, T] 1/0 padding mask.

    Returns None when every position may attend (no padding, bidirectional), which lets SDPA
    take its fastest kernel. On a GPU that check would wait for the device, so there a given
    mask is always used (the data side leaves it out of full batches).
    """
    if padding is None or (padding.device.type == "cpu" and bool(padding.all())):
        if not causal:
            return None
        return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # [T, T]
    keys = padding.bool()[:, None, None, :]  # [B, 1, 1, T]
    if causal:
        keys = keys & torch.ones(T, T, dtype=torch.bool, device=device).tril()  # [B, 1, T, T]
    return keys


class EncoderOutput(NamedTuple):
    last_hidden_state: torch.Tensor
    """[B, T, H] output of the last block."""
    pooled: torch.Tensor
    """[B, H] tanh(W h_[CLS] + b): the pooled sentence vector the NSP head reads."""
    hidden_states: tuple[torch.Tensor, ...] | None
    """L + 1 tensors [B, T, H] (embeddings, then each block) when asked for, else None."""


class Encoder(nn.Module):
    """The bidirectional transformer encoder (Hugging Face `BertModel`).

    `fast` (default True) swaps in the speed paths of `bertkit.model.fast` (the same function,
    faster on the CPU); `fast=False` is the reference, exactly this file.
    """

    def __init__(self, cfg: EncoderConfig, fast: bool = True):
        super().__init__()
        self.config = cfg
        self.fast = fast
        self.embeddings = Embeddings(cfg, fast)
        self.blocks = nn.ModuleList(Block(cfg, fast) for _ in range(cfg.num_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *, causal: bool = False,
                output_hidden_states: bool = False) -> EncoderOutput:
        """input_ids, token_type_ids, attention_mask: [B, T]. `causal=True` lets each token
        see only itself and the tokens to its left (the left-to-right variant)."""
        x = self.embeddings(input_ids, token_type_ids)  # [B, T, H]
        mask = build_attention_mask(attention_mask, input_ids.shape[1], causal, x.device)
        states = [x] if output_hidden_states else None
        for block in self.blocks:
            x = block(x, mask, causal)
            if states is not None:
                states.append(x)
        return EncoderOutput(x, self.pool(x[:, 0]), tuple(states) if states is not None else None)

    def forward_rows(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                     attention_mask: torch.Tensor | None,
                     *rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The last block's output at some rows only: for each tensor of flat indices into
        B*T in `rows` ([N_i], any order, repeats allowed), one [N_i, H] tensor, equal to the
        same rows of `forward(...).last_hidden_state`.

        A head that reads a few positions (the masked ones, [CLS]) needs nothing else; with
        `fast` the last block's output projection and feed-forward then run on those rows
        only (`fast.block_at_rows`).
        """
        wanted = rows[0] if len(rows) == 1 else torch.cat(rows)  # [N]
        x = self.embeddings(input_ids, token_type_ids)  # [B, T, H]
        mask = build_attention_mask(attention_mask, input_ids.shape[1], False, x.device)
        for block in self.blocks[:-1]:
            x = block(x, mask, False)
        if self.fast:
            h = fast_paths.block_at_rows(self.blocks[-1], x, mask, wanted)  # [N, H]
        else:
            x = self.blocks[-1](x, mask, False)
            h = x.reshape(-1, x.shape[-1]).index_select(0, wanted)  # [N, H]
        return h.split([r.shape[0] for r in rows])

    def pool(self, cls: torch.Tensor) -> torch.Tensor:
        """[CLS] outputs [B, H] -> the pooled sentence vectors tanh(W h + b) [B, H]."""
        return torch.tanh(self.pooler(cls))


def cls_rows(input_ids: torch.Tensor) -> torch.Tensor:
    """The flat indices of the [CLS] (first) position of each sequence in B*T: [B], for
    `Encoder.forward_rows`."""
    B, T = input_ids.shape
    return torch.arange(B, device=input_ids.device) * T


def init_weights(module: nn.Module, cfg: EncoderConfig,
                 generator: torch.Generator | None = None) -> None:
    """BERT's initialisation: N(0, initializer_range) weights, zero biases, unit LayerNorms.

    Draws from `generator` (a seeded torch.Generator gives the same weights every time), or
    from torch's global generator when None. A bias a head owns directly (the MLM head's
    vocabulary bias) starts at zero too.
    """
    std = cfg.initializer_range
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std, generator=generator)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std, generator=generator)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(getattr(m, "bias", None), nn.Parameter):
            nn.init.zeros_(m.bias)


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["Embeddings", "SelfAttention", "Block", "Encoder", "EncoderOutput", "attend",
           "build_attention_mask", "cls_rows", "init_weights", "num_parameters",
           "activation_fn"]
