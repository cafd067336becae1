"""What a training step's activations take, estimated before training, and the memory of the
device that holds them: for the one line that warns of a step unlikely to fit.

A block keeps for its backward pass, for b sequences of s tokens, h wide, a heads and an
intermediate layer I wide, sb(18h + 4I) + 5as^2 b bytes in 16-bit precision: the count of
Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models"
(sbh(34 + 5as/h) where I = 4h). It is doubled here, 4 bytes a value whatever the precision:
autocast keeps the softmax and the norms in fp32, and a warning had better err high
(tests/model/test_step_memory.py: within 0.6 and 1.5 times what autograd keeps in fp32). The
weights, their gradients and the optimiser's state come on top.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from bertkit.config import EncoderConfig

BYTES_PER_VALUE = 4


def step_activation_bytes(cfg: EncoderConfig, sequences: int, length: int) -> float:
    """The activations a training step of `sequences` inputs of `length` tokens keeps for its
    backward pass, in bytes: every block's, at 4 bytes a value."""
    s, b, h = length, sequences, cfg.hidden_size
    per_block = s * b * (18 * h + 4 * cfg.intermediate_size) + 5 * cfg.num_heads * s * s * b
    return cfg.num_layers * per_block * BYTES_PER_VALUE / 2


def device_memory(device: torch.device) -> int | None:
    """The memory of `device` in bytes: an accelerator's own, or the machine's (its control
    group's limit where lower); None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type != "cpu":
        return None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return min(total, _cgroup_limit() or total)


def _cgroup_limit() -> int | None:
    """The control group's memory limit (cgroup v2, then v1); None where there is none."""
    for name in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def memory_warning(need: float, have: int | None, what: str, advice: str) -> str | None:
    """One line when `need` bytes of activations are likely not to fit in `have` (three
    quarters of it: the weights, the optimiser and the process take the rest); None else."""
    if have is None or need <= 0.75 * have:
        return None
    return (f"{what} may need about {need / 2 ** 30:.1f} GiB for its activations, of "
            f"{have / 2 ** 30:.1f} GiB here: {advice}")


__all__ = ["step_activation_bytes", "device_memory", "memory_warning", "BYTES_PER_VALUE"]
