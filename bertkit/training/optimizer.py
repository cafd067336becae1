"""The optimiser and its schedule: AdamW with the usual groups (no decay on biases and
LayerNorm weights), and the learning-rate multiplier of each step (linear warm-up, then linear,
cosine, constant or warmup-stable-decay, over max_steps or over the time budget)."""
from __future__ import annotations

import math

import torch
from torch import nn

from bertkit.config import TrainConfig


def default_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on matrices and embeddings, none on biases and LayerNorm weights."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def run_progress(cfg: TrainConfig, step: int, train_seconds: float) -> float:
    """How far through the run optimizer step `step` (counted from 1) is, 0 to 1: by steps,
    or for a time budget without max_steps by the share of max_time spent."""
    if cfg.max_steps is not None:
        return min(1.0, (step - 1) / cfg.max_steps)
    return min(1.0, train_seconds / (60 * cfg.max_time))


def micro_batches(cfg: TrainConfig, step: int, train_seconds: float) -> int:
    """Micro-batches accumulated into optimizer step `step`: cfg.grad_accum, or with batch
    growth growing linearly to cfg.grad_accum_final over the run."""
    if cfg.grad_accum_final is None:
        return cfg.grad_accum
    grown = cfg.grad_accum + (cfg.grad_accum_final - cfg.grad_accum) \
        * run_progress(cfg, step, train_seconds)
    return min(cfg.grad_accum_final, int(grown))


def lr_factor(cfg: TrainConfig, step: int, train_seconds: float) -> float:
    """Multiplier of the peak learning rate for optimizer step `step` (counted from 1).

    Progress through the run is step / max_steps or, for a time budget without max_steps,
    the fraction of max_time spent (the schedule of a time-limited run follows the clock).
    """
    if cfg.max_steps is not None:
        progress, per_step = (step - 1) / cfg.max_steps, 1 / cfg.max_steps
    else:
        progress, per_step = train_seconds / (60 * cfg.max_time), 0.0
    if cfg.warmup_steps is not None:
        warm_end = cfg.warmup_steps * per_step
        warm = 1.0 if cfg.warmup_steps == 0 else min(1.0, step / cfg.warmup_steps)
    else:
        warm_end = cfg.warmup_fraction
        warm = 1.0 if warm_end == 0 else min(1.0, (progress + per_step) / warm_end)
    if cfg.schedule == "constant" or progress <= warm_end:
        return warm
    if cfg.schedule == "wsd":
        decay_start = max(warm_end, 1.0 - cfg.decay_fraction)
        if progress <= decay_start:
            return warm
        t = min(1.0, (progress - decay_start) / max(1e-12, 1.0 - decay_start))
        return warm * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * (1.0 - t))
    t = min(1.0, (progress - warm_end) / max(1e-12, 1.0 - warm_end))
    shape = 1.0 - t if cfg.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * t))
    return warm * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape)


def make_optimizer(groups: list[dict], cfg: TrainConfig, device: torch.device):
    """AdamW, fused into one kernel per step where the device supports it, else foreach."""
    kwargs = dict(lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    if device.type in ("cpu", "cuda"):
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (RuntimeError, ValueError):
            pass
    return torch.optim.AdamW(groups, foreach=True, **kwargs)
