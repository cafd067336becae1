"""What a training run holds: the fixed setup (`Run`: the model, its optimiser, the data, the
log), what changes step by step (`State`, whose counters a checkpoint saves), and the endless,
resumable feed of batches (`Feed`), for `bertkit.training.loop`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch
from torch import nn

from bertkit.config import TrainConfig
from bertkit.files import UserError
from bertkit.progress import Progress
from bertkit.runtime import SharedCores
from bertkit.training.mfu import FlopMeter
from bertkit.training.runlog import MetricsLog


class Feed:
    """Endless batches from an iterable: a new pass when one ends, and a resumable position."""

    def __init__(self, batches: Iterable[dict]):
        self.batches, self.epoch, self.index, self.it = batches, 0, 0, None

    def next(self) -> dict:
        if self.it is None:
            self.it = iter(self.batches)
        try:
            batch = next(self.it)
        except StopIteration:
            if self.index == 0:
                raise UserError("the training data yields no batches") from None
            self.epoch, self.index, self.it = self.epoch + 1, 0, iter(self.batches)
            batch = next(self.it)
        self.index += 1
        return batch

    def set_progress(self, fraction: float) -> None:
        if hasattr(self.batches, "set_progress"):
            self.batches.set_progress(fraction)

    @property
    def shapes_vary(self) -> bool:
        """Whether the batches change shape during the run: they give `first_batches()`, one
        of each shape (pretraining's context phases)."""
        return hasattr(self.batches, "first_batches")

    def close(self) -> None:
        """Stop the iterator (and any prefetching thread behind it)."""
        if hasattr(self.it, "close"):
            self.it.close()
        self.it = None

    def state_dict(self) -> dict:
        state = {"epoch": self.epoch, "index": self.index}
        if hasattr(self.batches, "state_dict"):
            state["batches"] = self.batches.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index, self.it = state["epoch"], state["index"], None
        if "batches" in state and hasattr(self.batches, "load_state_dict"):
            self.batches.load_state_dict(state["batches"])
            return
        self.it = iter(self.batches)
        for _ in range(self.index):
            next(self.it)


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


def dynamic_shapes(batch: dict) -> dict:
    """`batch` with the first two sizes of its tensors marked dynamic for torch.compile: the
    first compile then covers every shape the run's batches take, where a new shape would
    otherwise compile again in the middle of the timed run (a phase of longer rows)."""
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            for dim in range(min(value.dim(), 2)):
                torch._dynamo.maybe_mark_dynamic(value, dim)
    return batch


def num_tokens(batch: dict) -> int:
    """Real tokens in a CPU batch, counted without touching the device."""
    if "num_tokens" in batch:
        return int(batch["num_tokens"])
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int(batch["input_ids"].numel())


@dataclass
class Run:
    """What stays fixed through a run: the model and its optimiser, the data, the log."""
    cfg: TrainConfig
    device: torch.device
    out_dir: Path
    model: nn.Module
    objective: nn.Module
    """model + loss_fn, compiled and/or wrapped in DDP as asked."""
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    feed: Feed
    fingerprint: dict
    """The model's shapes and the caller's fingerprint (`run_fingerprint`)."""
    evaluate: Callable[[nn.Module], dict] | None
    target_count: Callable[[dict], torch.Tensor] | None
    show_progress: bool
    distributed: bool
    """A process group is set up (torchrun): the ranks train together under DDP."""
    rank: int
    world: int
    log: MetricsLog | None = None
    """Opened once the step to resume from is known."""
    progress: Progress | None = None
    """The live bar or periodic lines on stderr; the log's lines go through it."""
    cores: SharedCores | None = None
    """A run of one process on the CPU: watches for other processes on its cores."""
    settings: dict | None = None
    """The run's record, its precision resolved: written once the checkpoint is loaded."""
    flops: FlopMeter | None = None
    """Counts the model's FLOPs where the caller declared them: the MFU figures."""

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def checkpoints(self) -> Path:
        return self.out_dir / "checkpoints"


@dataclass
class State:
    """What changes step by step; the counters are what a checkpoint saves."""
    step: int = 0
    tokens: int = 0
    train_seconds: float = 0.0
    best_value: float | None = None
    best_step: int | None = None
    evals_since_best: int = 0
    stopped_by: str | None = None
    last_eval_step: int = -1
    last_checkpoint_step: int = -1
    train_metrics: dict[str, float] = field(default_factory=dict)
    eval_metrics: dict[str, float] = field(default_factory=dict)
    # figures summed since the last log line
    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    window_steps: int = 0
    window_tokens: int = 0
    window_seconds: float = 0.0
    micro_batches: int = 1
    """Micro-batches of the step being taken (batch growth changes it)."""
    logged_at: int | None = None
    """The step whose figures train_metrics holds (None: none logged in this process yet)."""

    def saved(self) -> dict:
        return {"step": self.step, "tokens": self.tokens, "train_seconds": self.train_seconds,
                "best_value": self.best_value, "best_step": self.best_step,
                "evals_since_best": self.evals_since_best}


def final_step(run: Run, state: State) -> bool:
    return run.cfg.max_steps is not None and state.step >= run.cfg.max_steps
