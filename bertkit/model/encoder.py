"""The BERT encoder, top to bottom: embeddings -> N post-LN blocks -> pooler, and its heads.

Shapes: B batch, T tokens, H hidden, A heads, D = H / A head width, V vocabulary, N selected
positions. Parameter names are bertkit's own (fused q/k/v); `hub.py` maps them to and from
Hugging Face names.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import EncoderConfig


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


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout. On the CPU the keep/drop decisions come four to a 64-bit random number
    (16 bits each; p is rounded to a multiple of 1/65536 and the kept values scaled by
    1 / (1 - that p)), 2-3x faster than F.dropout's one generator call per element, which is
    a tenth of a CPU training step. Elsewhere F.dropout, whose GPU kernel is already fused."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    cut = round(p * 65536)
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1)
    keep = bits.view(torch.int16)[:n].view(x.shape) >= cut - 32768  # P(keep) = 1 - cut/65536
    return x * (keep.to(x.dtype) * (65536 / (65536 - cut)))


class Dropout(nn.Module):
    """nn.Dropout drawing its mask with `dropout`."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Embeddings(nn.Module):
    """Word + learned position + segment embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self.segment = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.hidden_dropout)

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

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H], or [N, H] at `rows` (flat indices into B*T)."""
        B, T, H = x.shape
        A, D = self.num_heads, H // self.num_heads
        p = self.dropout_p if self.training else 0.0
        if rows is not None and rows.shape[0] <= B and not causal:
            # As few rows as sequences (a sentence head's [CLS]): queries only at the rows,
            # each against its own sequence's keys, copied out per row.
            N = rows.shape[0]
            w, b = self.qkv.weight, self.qkv.bias
            q = F.linear(x.reshape(B * T, H).index_select(0, rows), w[:H], b[:H])  # [N, H]
            k, v = F.linear(x, w[H:], b[H:]).view(B, T, 2, A, D).unbind(2)  # 2 x [B, T, A, D]
            seq = torch.div(rows, T, rounding_mode="floor")  # [N]
            k, v = (t.index_select(0, seq).transpose(1, 2) for t in (k, v))  # 2 x [N, A, T, D]
            mask = mask.index_select(0, seq) if mask is not None else None  # [N, 1, 1, T]
            y = attend(q.view(N, A, 1, D), k, v, mask, False, p)  # [N, A, 1, D]
            return self.out(y.reshape(N, H))
        q, k, v = self.qkv(x).view(B, T, 3, A, D).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # 3 x [B, A, T, D]
        y = attend(q, k, v, mask, causal, p).transpose(1, 2).reshape(B, T, H)  # [B, T, H]
        if rows is not None:  # many rows: attention for all, the rest only at the rows
            y = y.reshape(B * T, H).index_select(0, rows)  # [N, H]
        return self.out(y)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           causal: bool, dropout_p: float) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v with dropout on the weights; q, k, v: [B, A, T, D].

    SDPA, except for dropout on the CPU: SDPA's fused CPU kernels take none and its fallback
    draws the [B, A, T, T] mask one element at a time, so the same math is spelled out here
    with `dropout`'s cheaper draw.
    """
    if dropout_p == 0.0 or q.device.type != "cpu":
        # SDPA's own causal path cannot take a padding mask; `attention_mask` folds it in.
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=causal and mask is None)
    T = q.shape[-2]
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # [B, A, T, T]; q is the smaller
    if mask is None and causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return dropout(scores.softmax(-1), dropout_p, True) @ v  # [B, A, T, D]


class Block(nn.Module):
    """Post-LN transformer block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.act = activation_fn(cfg.activation)
        self.dropout = Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]; with `rows` (flat indices into B*T), only those rows
        [N, H]: attention still reads every token, everything after it runs on N rows."""
        y = self.attn(x, mask, causal, rows)
        if rows is not None:
            x = x.reshape(-1, x.shape[-1]).index_select(0, rows)  # [N, H]
        x = self.attn_norm(x + self.dropout(y))
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
    """[B, T, H] output of the last block, or [N, H] at the `rows` asked for."""
    pooled: torch.Tensor | None
    """[B, H] tanh(W h_[CLS] + b): the pooled sentence vector the NSP head reads (None when
    only some rows were asked for: pool their [CLS] rows with `Encoder.pool`)."""
    hidden_states: tuple[torch.Tensor, ...] | None
    """L + 1 tensors [B, T, H] (embeddings, then each block) when asked for, else None."""


class Encoder(nn.Module):
    """The bidirectional transformer encoder (Hugging Face `BertModel`)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *, causal: bool = False,
                output_hidden_states: bool = False,
                rows: torch.Tensor | None = None) -> EncoderOutput:
        """input_ids, token_type_ids, attention_mask: [B, T]. `causal=True` lets each token
        see only itself and the tokens to its left (the left-to-right variant).

        `rows` ([N] flat indices into B*T) asks for the last block's output at those rows
        only. A head that reads a few positions (the masked ones, [CLS]) needs nothing else,
        and the last block's output projection and feed-forward then run on N rows instead of
        B*T; its attention still reads every token, so the rows equal the full output's.
        """
        x = self.embeddings(input_ids, token_type_ids)  # [B, T, H]
        mask = build_attention_mask(attention_mask, input_ids.shape[1], causal, x.device)
        states = [x] if output_hidden_states else None
        for i, block in enumerate(self.blocks):
            x = block(x, mask, causal, rows if i == len(self.blocks) - 1 else None)
            if states is not None:
                states.append(x)
        pooled = self.pool(x[:, 0]) if rows is None else None
        return EncoderOutput(x, pooled, tuple(states) if states is not None else None)

    def pool(self, cls: torch.Tensor) -> torch.Tensor:
        """[CLS] outputs [B, H] -> the pooled sentence vectors tanh(W h + b) [B, H]."""
        return torch.tanh(self.pooler(cls))


def cls_rows(input_ids: torch.Tensor) -> torch.Tensor:
    """The flat indices of the [CLS] (first) position of each sequence in B*T: [B]."""
    B, T = input_ids.shape
    return torch.arange(B, device=input_ids.device) * T


def last_block_rows(encoder: Encoder, input_ids: torch.Tensor,
                    token_type_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                    *rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One encoder pass whose last block runs only at the rows asked for: one [N_i, H] tensor
    for each tensor of flat indices into B*T in `rows`."""
    wanted = rows[0] if len(rows) == 1 else torch.cat(rows)
    h = encoder(input_ids, token_type_ids, attention_mask, rows=wanted).last_hidden_state
    return h.split([r.shape[0] for r in rows])


class MaskedLMHead(nn.Module):
    """Dense + activation + LayerNorm; the decoder tied to the word embeddings and `bias` are
    applied by the caller."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = activation_fn(cfg.activation)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: [..., H] -> the states the tied decoder projects onto the vocabulary, [..., H]
        (the caller applies it with `self.bias`: `objectives.vocab_terms` fuses it with the
        loss)."""
        return self.norm(self.act(self.dense(h)))


class SpanBoundaryHead(nn.Module):
    """SpanBERT's span-boundary objective: predict each token of a masked span from the two
    tokens just outside it and its offset in the span.

    [h_left; h_right; P[offset]] -> Linear -> GELU -> LayerNorm -> Linear -> GELU -> LayerNorm,
    then the decoder tied to the word embeddings (with the MLM head's bias), which the caller
    applies (`objectives.vocab_terms` fuses it with the loss).
    """

    def __init__(self, cfg: EncoderConfig, max_offset: int = 32):
        super().__init__()
        H = cfg.hidden_size
        self.position = nn.Embedding(max_offset, H)
        self.dense1 = nn.Linear(3 * H, H)
        self.norm1 = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.dense2 = nn.Linear(H, H)
        self.norm2 = nn.LayerNorm(H, eps=cfg.layer_norm_eps)

    def forward(self, left: torch.Tensor, right: torch.Tensor,
                offset: torch.Tensor) -> torch.Tensor:
        """left, right: [N, H] boundary outputs; offset: [N] 0-based position in the span
        (longer spans share the last row) -> states to decode [N, H]."""
        p = self.position(offset.clamp(max=self.position.num_embeddings - 1))  # [N, H]
        x = self.norm1(F.gelu(self.dense1(torch.cat([left, right, p], dim=-1))))  # [N, H]
        return self.norm2(F.gelu(self.dense2(x)))


class PretrainingModel(nn.Module):
    """Encoder + masked-LM head + next-sentence head (Hugging Face `BertForPreTraining`).

    `sbo` optionally adds SpanBERT's span-boundary head; it has no Hugging Face name, so
    `hub.save_model` must not see it (pretraining saves it apart, in sbo.safetensors).
    """

    def __init__(self, cfg: EncoderConfig, sbo: SpanBoundaryHead | None = None):
        super().__init__()
        self.config = cfg
        self.encoder = Encoder(cfg)
        self.mlm = MaskedLMHead(cfg)
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        self.sbo = sbo

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *,
                positions: torch.Tensor | None = None, causal: bool = False,
                output_hidden_states: bool = False):
        """Returns (mlm_logits, nsp_logits [B, 2], encoder output).

        mlm_logits are [B, T, V] for every position, or [N, V] for `positions`, a [N] tensor
        of flat indices into B*T: then only those positions (and [CLS]) pass the last block
        and the vocabulary projection, and the encoder output holds their states [N, H].
        Training losses use `objectives.vocab_terms` on `self.mlm`'s states instead.
        """
        if positions is None:
            out = self.encoder(input_ids, token_type_ids, attention_mask, causal=causal,
                               output_hidden_states=output_hidden_states)
        else:
            if causal or output_hidden_states:
                raise ValueError("positions= takes neither causal nor output_hidden_states")
            h, cls = last_block_rows(self.encoder, input_ids, token_type_ids, attention_mask,
                                     positions, cls_rows(input_ids))
            out = EncoderOutput(h, self.encoder.pool(cls), None)
        mlm_logits = F.linear(self.mlm(out.last_hidden_state), self.encoder.embeddings.word.weight,
                              self.mlm.bias)
        return mlm_logits, self.nsp(out.pooled), out


def init_weights(module: nn.Module, cfg: EncoderConfig) -> None:
    """BERT's initialisation: N(0, initializer_range) weights, zero biases, unit LayerNorms."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=cfg.initializer_range)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=cfg.initializer_range)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, MaskedLMHead):
            nn.init.zeros_(m.bias)


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _layer_flops(cfg: EncoderConfig, seq_len: int) -> tuple[float, float]:
    """Forward FLOPs per token of one block: (q/k/v projections with QK^T and AV, which every
    row pays; the output projection and feed-forward, which `rows=` can skip)."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    return 2 * 3 * H * H + 2 * 2 * seq_len * H, 2 * (H * H + 2 * H * I)


def encoder_flops_per_token(cfg: EncoderConfig, seq_len: int) -> float:
    """Forward FLOPs per token of the encoder on sequences of `seq_len` tokens (inference).

    Counts matmuls only: 2 FLOPs per multiply-add.
    """
    return cfg.num_layers * sum(_layer_flops(cfg, seq_len))


def model_flops_per_token(cfg: EncoderConfig, seq_len: int, predicted_fraction: float) -> float:
    """Training FLOPs per token (forward + backward = 3x forward) of the encoder and MLM head.

    The FLOPs that `rows=` skips are not counted: the last block's output projection and
    feed-forward, and the head, are paid only for the predicted fraction of positions.
    """
    H, V = cfg.hidden_size, cfg.vocab_size
    skipped = (1 - predicted_fraction) * _layer_flops(cfg, seq_len)[1]
    head = (2 * H * H + 2 * H * V) * predicted_fraction
    return 3.0 * (encoder_flops_per_token(cfg, seq_len) - skipped + head)


__all__ = ["Embeddings", "SelfAttention", "Block", "Encoder", "EncoderOutput", "MaskedLMHead",
           "SpanBoundaryHead", "PretrainingModel", "build_attention_mask", "cls_rows",
           "last_block_rows", "init_weights",
           "num_parameters", "encoder_flops_per_token", "model_flops_per_token"]
