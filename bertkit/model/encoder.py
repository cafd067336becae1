"""The encoder, top to bottom: embeddings -> N blocks -> pooler (or a final norm).

Two architectures, chosen by `EncoderConfig.architecture` (an argument, not a class each):
"bert", BERT as published (post-LN blocks, learned positions, segments, biases, a tanh pooler),
and "modern", the small-budget recipe of cramming, MosaicBERT and ModernBERT (pre-LN blocks
with a LayerNorm after the embeddings and after the last block, a gated feed-forward, rotary
positions, no biases). The same modules build both; each place they differ says why.

Shapes: B batch, T tokens, H hidden, A heads, D = H / A head width, I feed-forward width,
N selected rows. Parameter names are bertkit's own (fused q/k/v); `hub.py` maps them to and
from Hugging Face names (BertModel, ModernBertModel). The heads (masked LM, next sentence,
span boundary) are in `heads.py`.

This file is the reference: nn.Dropout, F.scaled_dot_product_attention, every block on every
position (padding too), a local layer's window as a dense mask. `Encoder(cfg, fast=True)` (the
default) swaps in the speed paths of `fast.py` (a long input's local layers block by block:
`local_attention.py`), which compute the same function; `fast=False` runs exactly what is
written here.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import EncoderConfig
from bertkit.model import fast as fast_paths
from bertkit.model.local_attention import Band
from bertkit.runtime import reads_are_free


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


def set_dropout(encoder: nn.Module, p: float) -> nn.Module:
    """Every dropout of `encoder` (hidden and attention) at rate `p`, for this run only: its
    config, and so a model saved from it, keeps the rates it was made with."""
    for module in encoder.modules():
        if isinstance(module, (nn.Dropout, fast_paths.PackedDropout)):
            module.p = p
        if isinstance(module, SelfAttention):
            module.dropout_p = p
    return encoder


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           causal: bool, dropout_p: float) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v with dropout on the weights; q, k, v: [B, A, T, D]."""
    # SDPA's own causal path cannot take a padding mask; `build_attention_mask` folds it in.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          is_causal=causal and mask is None)


class Embeddings(nn.Module):
    """Word + learned position + segment embeddings ("bert"; "modern": words only, its
    positions are rotary and it has no segments), then LayerNorm and dropout."""

    def __init__(self, cfg: EncoderConfig, fast: bool = False):
        super().__init__()
        bert = cfg.architecture == "bert"
        E = cfg.embedding_width
        self.max_positions = cfg.max_positions
        self.word = nn.Embedding(cfg.vocab_size, E, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_positions, E) if bert else None
        self.segment = nn.Embedding(cfg.type_vocab_size, E) if bert else None
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps, bias=bert)
        self.dropout = make_dropout(cfg.hidden_dropout, fast)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.shape[-1]
        if T > self.max_positions:
            raise ValueError(f"input of {T} tokens is longer than the model's "
                             f"{self.max_positions} positions")
        x = self.word(input_ids)  # [B, T, H]
        if self.position is not None:
            if position_ids is None:
                position_ids = torch.arange(T, device=input_ids.device)
            x = x + self.position(position_ids)
        if self.segment is not None:
            x = x + (self.segment.weight[0] if token_type_ids is None
                     else self.segment(token_type_ids))
        return self.dropout(self.norm(x))


class Rotary(nn.Module):
    """Rotary position embedding (RoFormer, as ModernBERT applies it): each pair of
    dimensions (j, j + D/2) of q and k is turned by the angle position x theta^(-2j/D), so that
    q.k depends on the distance between the two tokens only."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.register_buffer("inv_freq", _inverse_frequencies(head_dim, theta),
                             persistent=False)  # [D/2]

    def set_theta(self, theta: float) -> None:
        """The base of the next forward's angles: the buffer's values replaced in place, so
        that a compiled model, which reads buffers as inputs, runs on uncompiled."""
        with torch.no_grad():
            self.inv_freq.copy_(_inverse_frequencies(2 * self.inv_freq.numel(), theta))

    def angles(self, T: int, device: torch.device, positions: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each [T, D], in fp32; at `positions` [B, T] (a packed row's, which
        restart at each document), each [B, 1, T, D]."""
        if positions is not None:
            freqs = positions.float()[..., None] * self.inv_freq.to(device)  # [B, T, D/2]
            freqs = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, T, D]
            return freqs.cos(), freqs.sin()
        freqs = torch.arange(T, device=device, dtype=torch.float)[:, None] \
            * self.inv_freq.to(device)[None, :]  # [T, D/2]
        freqs = torch.cat([freqs, freqs], dim=-1)  # [T, D]
        return freqs.cos(), freqs.sin()


def _inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """theta^(-2j/D) for each pair j of a head's D dimensions, [D/2] in fp32."""
    return 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)


def set_rope_base(model: nn.Module, base: float | None, local: float | None = None,
                  saved: bool = False) -> None:
    """The rotary base of the global layers (`base`) and of the local layers (`local`) of
    every encoder `model` holds (ELECTRA's generator and discriminator alike), from its next
    forward; none: as it is. A context phase's (ModernBERT extended its context with a larger
    global base). `saved`: its config's too, and so a model saved from it."""
    for module in model.modules():
        if not isinstance(module, Encoder) or module.rotary is None:
            continue
        for rotary, theta, name in ((module.rotary[0], base, "rope_theta"),
                                    (module.rotary[1], local, "local_rope_theta")):
            if theta is not None:
                rotary.set_theta(theta)
                if saved:
                    setattr(module.config, name, theta)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, A, T, D] turned by the angles of `Rotary.angles` (in fp32, back in x's dtype)."""
    half = x.shape[-1] // 2
    xf = x.float()
    turned = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos + turned * sin).to(x.dtype)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention with one fused q/k/v projection."""

    def __init__(self, cfg: EncoderConfig, fast: bool = False):
        super().__init__()
        bias = cfg.architecture == "bert"
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=bias)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=bias)
        self.dropout_p = cfg.attention_dropout
        self.attend = fast_paths.Attend(attend) if fast else attend

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                real: fast_paths.RealTokens | None = None) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]; `rope` (cos, sin) [T, D] turns q and k ("modern").
        With `real` (the speed paths' unpadded batch), x is the batch's real tokens [N, H]
        -> [N, H]: the projections run on those, attention in the [B, T] layout."""
        p = self.dropout_p if self.training else 0.0
        qkv = self.qkv(x)  # [B, T, 3H] or [N, 3H]
        q, k, v = self.heads(qkv if real is None else real.scatter(qkv), rope)
        B, A, T, D = q.shape
        y = self.attend(q, k, v, mask, causal, p).transpose(1, 2).reshape(B, T, A * D)
        return self.out(y if real is None else real.gather(y))  # [B, T, H] or [N, H]

    def project(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [B, T, H] -> q, k, v, each [B, A, T, D], q and k turned by `rope`."""
        return self.heads(self.qkv(x), rope)

    def heads(self, qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fused projection's output [B, T, 3H] -> q, k, v, each [B, A, T, D], q and k
        turned by `rope`."""
        B, T, _ = qkv.shape
        A = self.num_heads
        D = qkv.shape[-1] // (3 * A)
        q, k, v = qkv.view(B, T, 3, A, D).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # 3 x [B, A, T, D]
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        return q, k, v


class Block(nn.Module):
    """A transformer block.

    "bert", post-LN: x = LN(x + Attn(x)); x = LN(x + FFN(x)), FFN(x) = W2 act(W1 x).
    "modern", pre-LN: x = x + Attn(LN(x)); x = x + FFN(LN(x)), with the gated FFN(x) =
    W2 (act(W1a x) * W1b x). The residual stream is never normalised, which keeps gradients
    sane at a high learning rate; block 0 skips its first LN, the embeddings' LN has just run.
    """

    def __init__(self, cfg: EncoderConfig, fast: bool = False, index: int = 0):
        super().__init__()
        self.pre_norm = cfg.architecture == "modern"
        bias = not self.pre_norm
        H, I, eps = cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps
        self.attn = SelfAttention(cfg, fast)
        self.attn_norm = (nn.Identity() if self.pre_norm and index == 0
                          else nn.LayerNorm(H, eps=eps, bias=bias))
        self.up = nn.Linear(H, 2 * I if self.pre_norm else I, bias=bias)
        self.down = nn.Linear(I, H, bias=bias)
        self.ffn_norm = nn.LayerNorm(H, eps=eps, bias=bias)
        self.act = activation_fn(cfg.activation)
        self.dropout = make_dropout(cfg.hidden_dropout, fast)
        # ModernBERT drops the attention output with the attention rate, BERT with the hidden one
        self.attn_dropout = (make_dropout(cfg.attention_dropout, fast) if self.pre_norm
                             else self.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                real: fast_paths.RealTokens | None = None) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]; with `real`, the real tokens [N, H] -> [N, H] (all
        but attention works token by token)."""
        if self.pre_norm:
            x = x + self.attn_dropout(self.attn(self.attn_norm(x), mask, causal, rope, real))
            return x + self.ffn(self.ffn_norm(x))
        x = self.attn_norm(x + self.dropout(self.attn(x, mask, causal, real=real)))
        return self.feed_forward(x)

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward layer alone: [..., H] -> [..., H]."""
        if self.pre_norm:
            a, g = self.up(x).chunk(2, dim=-1)  # 2 x [..., I]
            return self.down(self.dropout(self.act(a) * g))
        return self.dropout(self.down(self.act(self.up(x))))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The post-LN second half, row by row: x [..., H] -> LN(x + FFN(x)) [..., H]."""
        return self.ffn_norm(x + self.ffn(x))


def document_positions(documents: torch.Tensor) -> torch.Tensor:
    """Position ids [B, T] that restart at 0 where each document of a packed row starts, from
    its document ids [B, T] (non-decreasing along each row), as transformers'
    DataCollatorWithFlattening gives them."""
    T = documents.shape[-1]
    i = torch.arange(T, device=documents.device).expand_as(documents)  # [B, T]
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    return i - torch.where(starts, i, 0).cummax(-1).values


def build_attention_mask(padding: torch.Tensor | None, T: int, causal: bool,
                         device: torch.device, window: int = 0,
                         documents: torch.Tensor | None = None) -> torch.Tensor | None:
    """Boolean SDPA mask (True = may attend) from a [B, T] 1/0 padding mask; `window` > 0
    keeps each token to the tokens within window // 2 of it (local attention); `documents`
    [B, T] (a packed row's document ids) keeps each token to its own document's, a
    block-diagonal [B, 1, T, T] mask.

    Returns None when every position may attend (no padding, bidirectional, global, one
    document a row), which lets SDPA take its fastest kernel. On a GPU that check would wait
    for the device, so there a given mask is always used (the data side leaves it out of full
    batches, and the document ids out of batches of one document a row).
    """
    pairs = None  # [T, T] or None
    if causal:
        pairs = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    if window:
        i = torch.arange(T, device=device)
        near = (i[:, None] - i[None, :]).abs() <= window // 2  # [T, T]
        pairs = near if pairs is None else pairs & near
    if documents is not None:
        same = documents[:, None, :, None] == documents[:, None, None, :]  # [B, 1, T, T]
        pairs = same if pairs is None else same & pairs
    if padding is None or (reads_are_free(padding) and bool(padding.all())):
        return pairs
    keys = padding.bool()[:, None, None, :]  # [B, 1, 1, T]
    return keys if pairs is None else keys & pairs  # [B, 1, T, T]


class EncoderOutput(NamedTuple):
    last_hidden_state: torch.Tensor
    """[B, T, H] output of the last block ("modern": after the final LayerNorm). At padding
    the values mean nothing: the reference computes some, the speed paths may leave zeros."""
    pooled: torch.Tensor
    """[B, H] the sentence vector the NSP and sentence heads read: tanh(W h_[CLS] + b) for
    "bert", h_[CLS] itself for "modern" (which has no pooler)."""
    hidden_states: tuple[torch.Tensor, ...] | None
    """L + 1 tensors [B, T, H] (embeddings, then each block; the last is last_hidden_state,
    after the final LayerNorm of "modern", as in transformers) when asked for, else None."""


class Encoder(nn.Module):
    """The bidirectional transformer encoder (Hugging Face `BertModel` or `ModernBertModel`).

    `fast` (default True) swaps in the speed paths of `bertkit.model.fast` (the same function,
    faster on the CPU); `fast=False` is the reference, exactly this file.
    """

    def __init__(self, cfg: EncoderConfig, fast: bool = True,
                 embeddings: Embeddings | None = None, pooler: bool = True):
        super().__init__()
        self.config = cfg
        self.fast = fast
        modern = cfg.architecture == "modern"
        # ELECTRA's generator is given its discriminator's embeddings: one module, two owners
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg, fast)
        # embeddings narrower or wider than the blocks (ELECTRA's generator) are projected
        self.project = (nn.Linear(cfg.embedding_width, cfg.hidden_size, bias=not modern)
                        if cfg.embedding_width != cfg.hidden_size else None)
        self.blocks = nn.ModuleList(Block(cfg, fast, i) for i in range(cfg.num_layers))
        # "bert"'s pooler, unless the model built reads no pooled [CLS] (ELECTRA's networks)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size) if pooler and not modern \
            else None
        # pre-LN leaves the residual stream unnormalised: one LN after the last block
        self.final_norm = (nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False)
                           if modern else None)
        self.rotary = nn.ModuleList(
            [Rotary(cfg.head_dim, cfg.rope_theta), Rotary(cfg.head_dim, cfg.local_rope_theta)]
        ) if modern else None  # [global, local]

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The first block's input [B, T, H]: the embeddings, projected where their width
        differs from the blocks'; `position_ids` [B, T] (none: 0 to T - 1) place "bert"'s
        learned positions."""
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # [B, T, E]
        return x if self.project is None else self.project(x)

    def layer_inputs(self, attention_mask: torch.Tensor | None, T: int, causal: bool,
                     device: torch.device, blocked: bool = True,
                     documents: torch.Tensor | None = None) -> list[tuple]:
        """(mask, rope) for each block: global and local layers differ in both. With `fast`
        (and `blocked`), a local layer of a long input gets its mask unbuilt, a `Band` that
        `fast.Attend` computes block by block: a [T, T] mask would cost T^2 for a window's
        worth of keys. `documents` [B, T]: each token attends within its document, whose
        rotary positions restart at 0."""
        cfg = self.config
        positions = document_positions(documents) if documents is not None else None
        kinds = {}
        for is_global in {cfg.is_global(i) for i in range(cfg.num_layers)}:
            window = 0 if is_global else cfg.local_window
            if self.fast and blocked and fast_paths.blocks_pay(T, window):
                mask = Band(attention_mask, window, documents)
            else:
                mask = build_attention_mask(attention_mask, T, causal, device, window,
                                            documents)
            rope = (self.rotary[0 if is_global else 1].angles(T, device, positions)
                    if self.rotary is not None else None)
            kinds[is_global] = (mask, rope)
        return [kinds[cfg.is_global(i)] for i in range(cfg.num_layers)]

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *, causal: bool | None = None,
                output_hidden_states: bool = False,
                extra_embeddings: torch.Tensor | None = None,
                document_ids: torch.Tensor | None = None) -> EncoderOutput:
        """input_ids, token_type_ids, attention_mask: [B, T]. `causal=True` lets each token
        see only itself and the tokens to its left (the left-to-right variant); None runs the
        model as its config says it was trained (`config.causal`).
        `extra_embeddings` [B, T, H] is added to the embeddings before the first block: an
        input a task brings of its own (the tagging tasks' word-case embedding).
        `document_ids` [B, T]: rows packed from several documents, each position's (numbered
        along its row, non-decreasing): each document is then run as if alone, attending
        within itself, its positions from 0."""
        causal = self.config.causal if causal is None else causal
        x = self.embed(input_ids, token_type_ids, _positions(document_ids))  # [B, T, H]
        if extra_embeddings is not None:
            x = x + extra_embeddings.to(x.dtype)
        inputs = self.layer_inputs(attention_mask, input_ids.shape[1], causal, x.device,
                                   documents=document_ids)
        states = [x] if output_hidden_states else None
        # the speed paths run the blocks on the real tokens only where that pays; the
        # outputs at padding are then zeros (as ModernBertModel's unpadded ones are)
        real = fast_paths.real_tokens(attention_mask) if self.fast else None
        padded = (lambda h: h) if real is None else real.scatter  # noqa: E731
        if real is not None:
            x = real.gather(x)  # [N, H]
        for block, (mask, rope) in zip(self.blocks, inputs):
            x = block(x, mask, causal, rope, real)
            if states is not None:
                states.append(padded(x))
        if self.final_norm is not None:
            x = self.final_norm(x)
            if states is not None:
                states[-1] = padded(x)  # as transformers: the last hidden state is the output
        x = padded(x)  # [B, T, H]
        return EncoderOutput(x, self.pool(x[:, 0]), tuple(states) if states is not None else None)

    def forward_rows(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                     attention_mask: torch.Tensor | None, *rows: torch.Tensor,
                     document_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """The last block's output at some rows only: for each tensor of flat indices into
        B*T in `rows` ([N_i], any order, repeats allowed), one [N_i, H] tensor, equal to the
        same rows of `forward(..., document_ids=document_ids).last_hidden_state`.

        A head that reads a few positions (the masked ones, [CLS]) needs nothing else; with
        `fast` the last block's output projection and feed-forward then run on those rows
        only (`fast.block_at_rows`).
        """
        wanted = rows[0] if len(rows) == 1 else torch.cat(rows)  # [N]
        x = self.embed(input_ids, token_type_ids, _positions(document_ids))  # [B, T, H]
        inputs = self.layer_inputs(attention_mask, input_ids.shape[1], False, x.device,
                                   documents=document_ids)
        for block, (mask, rope) in zip(self.blocks[:-1], inputs[:-1]):
            x = block(x, mask, False, rope)
        last, (mask, rope) = self.blocks[-1], inputs[-1]
        if self.fast:
            h = fast_paths.block_at_rows(last, x, mask, wanted, rope)  # [N, H]
        else:
            x = last(x, mask, False, rope)
            h = x.reshape(-1, x.shape[-1]).index_select(0, wanted)  # [N, H]
        if self.final_norm is not None:
            h = self.final_norm(h)
        return h.split([r.shape[0] for r in rows])

    def pool(self, cls: torch.Tensor) -> torch.Tensor:
        """[CLS] outputs [B, H] -> the pooled sentence vectors [B, H]: tanh(W h + b) for
        "bert", h itself for "modern"."""
        return cls if self.pooler is None else torch.tanh(self.pooler(cls))


def _positions(documents: torch.Tensor | None) -> torch.Tensor | None:
    """`document_positions` of a packed batch's document ids; None without them."""
    return None if documents is None else document_positions(documents)


def cls_rows(input_ids: torch.Tensor) -> torch.Tensor:
    """The flat indices of the [CLS] (first) position of each sequence in B*T: [B], for
    `Encoder.forward_rows`."""
    B, T = input_ids.shape
    return torch.arange(B, device=input_ids.device) * T


def init_weights(module: nn.Module, cfg: EncoderConfig,
                 generator: torch.Generator | None = None) -> None:
    """BERT's initialisation: N(0, initializer_range) weights, zero biases, unit LayerNorms.
    "modern" scales the projections that write into the residual stream (attention output,
    feed-forward down) by 1 / sqrt(2 L), as GPT-2 and ModernBERT do, so that the stream's
    variance does not grow with depth.

    Draws from `generator` (a seeded torch.Generator gives the same weights every time), or
    from torch's global generator when None. A bias a head owns directly (the MLM head's
    vocabulary bias) starts at zero too.
    """
    std = cfg.initializer_range
    residual = {id(m) for b in module.modules() if isinstance(b, Block) and b.pre_norm
                for m in (b.attn.out, b.down)}
    for m in module.modules():
        if isinstance(m, nn.Linear):
            scale = (2 * cfg.num_layers) ** -0.5 if id(m) in residual else 1.0
            nn.init.normal_(m.weight, std=std * scale, generator=generator)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std, generator=generator)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(getattr(m, "bias", None), nn.Parameter):
            nn.init.zeros_(m.bias)


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["Embeddings", "Rotary", "rotate", "set_rope_base", "SelfAttention", "Block", "Encoder", "EncoderOutput", "attend", "set_dropout",
           "build_attention_mask", "document_positions", "cls_rows", "init_weights", "num_parameters",
           "activation_fn"]
