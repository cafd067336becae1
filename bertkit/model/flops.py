"""FLOPs of the encoder and the pretraining step, for throughput figures (MFU).

Counts matmuls only, 2 FLOPs per multiply-add; tested equal to torch's FlopCounterMode on a
real forward and training step (tests/model/test_model.py).
"""
from __future__ import annotations

from bertkit.config import EncoderConfig


def _layer_flops(cfg: EncoderConfig, seq_len: int) -> tuple[float, float]:
    """Forward FLOPs per token of one block: (q/k/v projections with QK^T and AV, which every
    row pays; the output projection and feed-forward, which `Encoder.forward_rows` skips at
    the rows not asked for)."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    ffn = 3 if cfg.architecture == "modern" else 2  # the gated layer has two input projections
    return 2 * 3 * H * H + 2 * 2 * seq_len * H, 2 * (H * H + ffn * H * I)


def encoder_flops_per_token(cfg: EncoderConfig, seq_len: int) -> float:
    """Forward FLOPs per token of the encoder on sequences of `seq_len` tokens (inference)."""
    return cfg.num_layers * sum(_layer_flops(cfg, seq_len))


def model_flops_per_token(cfg: EncoderConfig, seq_len: int, predicted_fraction: float) -> float:
    """Training FLOPs per token (forward + backward = 3x forward) of the encoder and MLM head.

    The FLOPs that `forward_rows` skips are not counted: the last block's output projection
    and feed-forward, and the head, are paid only for the predicted fraction of positions.
    """
    H, V = cfg.hidden_size, cfg.vocab_size
    skipped = (1 - predicted_fraction) * _layer_flops(cfg, seq_len)[1]
    head = (2 * H * H + 2 * H * V) * predicted_fraction
    return 3.0 * (encoder_flops_per_token(cfg, seq_len) - skipped + head)


__all__ = ["encoder_flops_per_token", "model_flops_per_token"]
