"""The task-weighted sum of layers (ELMo, Peters et al. 2018): CS109B lecture 17's "multiply each vector
by a weight based on the task, then sum".

    mix(h_0 .. h_L) = gamma * sum_j softmax(w)_j h_j

w (one scalar per layer) and gamma (one scale) are learned with the task; the layers stay as
the encoder made them. Starting from w = 0 gives every layer the same weight 1/(L+1).
Used by ELMo's tagger (bertkit.road.elmo) and by `finetune --layer-mix` over BERT's layers.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class ScalarMix(nn.Module):
    """Softmax-normalised per-layer weights and a scale over `num_layers` tensors of one shape."""

    def __init__(self, num_layers: int):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"a scalar mix needs at least one layer, got {num_layers}")
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    @property
    def num_layers(self) -> int:
        return self.weights.numel()

    def layer_weights(self) -> torch.Tensor:
        """[num_layers] softmax(w): what each layer contributes (sums to 1)."""
        return self.weights.float().softmax(0)

    def forward(self, layers: Sequence[torch.Tensor]) -> torch.Tensor:
        """num_layers tensors [..., H] -> gamma * their softmax(w)-weighted sum [..., H]."""
        if len(layers) != self.num_layers:
            raise ValueError(f"the mix has {self.num_layers} weights, got {len(layers)} layers")
        w = self.layer_weights().to(layers[0].dtype)
        mixed = layers[0] * w[0]
        for weight, h in zip(w[1:], layers[1:]):
            mixed = mixed + weight * h
        return self.gamma.to(mixed.dtype) * mixed


__all__ = ["ScalarMix"]
