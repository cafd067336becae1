"""A training step's activations, estimated: Korthikanti et al.'s count, near what autograd
really keeps for an encoder's backward pass; the one line when they may not fit (a
fine-tuning run's: tests/finetuning/test_rerank_negatives.py)."""
from __future__ import annotations

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.memory import device_memory, memory_warning, step_activation_bytes

CFG = EncoderConfig(vocab_size=1000, hidden_size=128, num_layers=2, num_heads=4,
                    intermediate_size=512, max_positions=256)


def test_the_count_is_korthikantis_at_4_bytes_a_value():
    """sbh(34 + 5as/h) bytes a block at 2 bytes a value where I = 4h; 4 bytes a value here."""
    s, b, h, a, L = 128, 8, 128, 4, 2
    assert step_activation_bytes(CFG, b, s) == pytest.approx(L * s * b * h * (34 + 5 * a * s / h)
                                                             * 2)


@pytest.mark.parametrize("B,T", [(8, 128), (4, 64)])
def test_the_estimate_is_near_what_autograd_keeps(B, T):
    """The tensors the forward pass saves for the backward pass (the weights aside), fp32 and
    dropout on: within 0.6 and 1.5 times the estimate."""
    torch.manual_seed(0)
    model = Encoder(CFG).train()
    weights = {p.data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in weights:
            kept[t.data_ptr()] = t.numel() * t.element_size()  # a tensor saved twice counts once
        return t

    ids = torch.randint(5, 1000, (B, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids, torch.zeros_like(ids), torch.ones_like(ids))
    ratio = sum(kept.values()) / step_activation_bytes(CFG, B, T)
    assert 0.6 < ratio < 1.5, ratio


def test_the_line_names_need_have_and_advice():
    GiB = 2 ** 30
    assert memory_warning(10 * GiB, 24 * GiB, "a step", "lower it") is None
    assert memory_warning(20 * GiB, 24 * GiB, "a step of 272 inputs", "lower it") == (
        "a step of 272 inputs may need about 20.0 GiB for its activations, of 24.0 GiB here: "
        "lower it")
    assert memory_warning(20 * GiB, None, "a step", "lower it") is None  # memory unknown


def test_the_cpus_memory_is_told():
    have = device_memory(torch.device("cpu"))
    assert have is None or have > 2 ** 28
    assert device_memory(torch.device("meta")) is None
