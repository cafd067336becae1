"""The batch a GPU trains at, found by measurement before the run's clock starts
(`pretrain --batch-size auto`, the default on a CUDA GPU).

From the CPU's default batch (16 sequences), the batch is doubled while a few timed training
steps' tokens/s rise by more than MIN_GAIN and the steps fit in the device's memory; the
largest that both fitted and paid is kept. A larger batch that is no faster is not taken: it
only makes fewer, larger steps of the same tokens. The search is bounded: at most MAX_SIZES
sizes and, once BUDGET_SECONDS have passed, no further size.

`choose_batch_size` is the search over any `measure(batch_size) -> tokens/s or None` (None:
that batch did not fit in memory, or the data holds too few rows for it), so that it is
tested with a measure made up; `timed_steps` is the measure of a model: a copy of it trained
for a few steps on a batch of each size, then freed.
"""
from __future__ import annotations

import copy
import gc
import itertools
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from bertkit.config import TrainConfig
from bertkit.runtime import autocast
from bertkit.training.optimizer import default_param_groups, make_optimizer
from bertkit.training.run_state import num_tokens, to_device

START = 16
"""The first batch tried: the CPU's default."""
MIN_GAIN = 0.05
"""A doubled batch is kept only where its tokens/s beat the last one's by more than this."""
MAX_SIZES = 6
"""At most this many sizes are tried (16 to 512)."""
BUDGET_SECONDS = 30.0
"""No further size is tried once the search has taken this long."""

Measure = Callable[[int], "float | None"]


@dataclass(frozen=True)
class BatchChoice:
    """The batch chosen and what the search measured."""
    size: int
    rates: tuple[tuple[int, float | None], ...]
    """Each size tried, in order, with its tokens/s (None: it did not fit, in memory or in
    the data)."""
    stop: str
    """Why the search stopped there."""

    def line(self) -> str:
        """The choice in one line: the batch, each size's rate, why no larger."""
        tried = ", ".join(f"{size}: " + ("did not fit" if rate is None else
                                         f"{rate:,.0f} tokens/s") for size, rate in self.rates)
        return f"batch {self.size} sequences, measured before training ({tried}): {self.stop}"


def choose_batch_size(measure: Measure, start: int = START, min_gain: float = MIN_GAIN,
                      max_sizes: int = MAX_SIZES, budget: float = BUDGET_SECONDS,
                      clock: Callable[[], float] = time.monotonic) -> BatchChoice:
    """The batch `start` doubled while `measure` says it fits and its tokens/s rise by more
    than `min_gain`; see the module docstring. Where not even `start` fits, `start`: the run
    then says what to lower. `start` is measured twice, the first time only to warm the
    process up: its first steps on a device choose kernels and grow memory pools, and on a
    CPU were measured 20 times slower than the same steps a few seconds later."""
    began, rates = clock(), []
    best, best_rate, size = start, None, start
    stop = f"the cap of {max_sizes} sizes"
    for tried in range(max_sizes):
        rate = measure(size)
        if tried == 0 and rate is not None:
            rate = measure(size)
        rates.append((size, rate))
        if rate is None:
            stop = (f"{size} did not fit" if best_rate is not None
                    else f"not even {size} fitted")
            break
        if best_rate is not None and rate <= best_rate * (1 + min_gain):
            stop = f"{size} was not {min_gain:.0%} faster"
            break
        best, best_rate = size, rate
        if clock() - began >= budget:
            stop = f"the search's {budget:g} s were spent"
            break
        size *= 2
    return BatchChoice(best, tuple(rates), stop)


def timed_steps(model: nn.Module, loss_fn, batches_of: Callable[[int], Iterable[dict]],
                cfg: TrainConfig, device: torch.device, steps: int = 3, untimed: int = 2
                ) -> Measure:
    """`measure(batch_size)` of `model`: tokens/s of `steps` training steps (after `untimed`
    ones: kernels chosen, memory allocated) of a copy of it, with its optimiser (AdamW's moments take memory as the run's
    will), on the first batches of `batches_of(batch_size)`, in `cfg.precision`; None where
    they run out of memory or the data has too few batches of that size. The copy is freed
    before it returns: the run's model is left as it was."""
    def measure(batch_size: int) -> float | None:
        batches = list(itertools.islice(iter(batches_of(batch_size)), untimed + steps))
        if len(batches) <= untimed:
            return None
        try:
            rate = _rate(copy.deepcopy(model), loss_fn, batches, cfg, device, untimed)
        except (torch.OutOfMemoryError, MemoryError):
            rate = None
        gc.collect()  # the copy, its optimiser and activations, before the next size
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return rate

    return measure


def _rate(model: nn.Module, loss_fn, batches: list[dict], cfg: TrainConfig,
          device: torch.device, untimed: int) -> float:
    """Tokens/s of training steps on `batches`, the first `untimed` of them not timed."""
    model.to(device).train()
    optimizer = make_optimizer(default_param_groups(model, cfg.weight_decay), cfg, device)
    start = 0.0
    for i, batch in enumerate(batches):
        if i == untimed:
            _synchronize(device)
            start = time.perf_counter()
        with autocast(device, cfg.precision):
            loss, _ = loss_fn(model, to_device(batch, device))
        loss.float().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    _synchronize(device)
    timed = batches[untimed:]
    return sum(num_tokens(b) for b in timed) / max(time.perf_counter() - start, 1e-9)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measures_batch(device: torch.device) -> bool:
    """Whether `--batch-size auto` measures on `device`: on a CUDA GPU, where the batch that
    keeps it busy is many times the CPU's; elsewhere auto is START."""
    return device.type == "cuda"


__all__ = ["BatchChoice", "choose_batch_size", "timed_steps", "measures_batch", "START",
           "MIN_GAIN", "MAX_SIZES", "BUDGET_SECONDS"]
