"""Model FLOP utilisation (MFU) of a training run: the model's FLOPs per second over the
rate the device could reach, at each log window and over the run.

The run declares the FLOPs of a batch (`BatchFlops`, pretraining's from `model.flops`: the
matmuls of the forward and backward passes, the ones a step skips not counted); the loop
counts them as the batches pass (`FlopMeter`). The rate they are set against (`Ceiling`) is
the device's published dense peak for the run's precision where `bertkit.peaks` knows the
device (a GPU), else the best matmul rate measured on this device, in this precision, for
half a second when the run starts (`runtime.matmul_limit`). A CPU has no published peak: its
MFU is always against the measured rate, which other work on its cores lowers.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch

from bertkit.peaks import published_peak, utilisation
from bertkit.runtime import matmul_limit

BatchFlops = Callable[[dict], float]
"""The training FLOPs (forward and backward) of the model on one batch of CPU tensors."""

MEASURE_SECONDS = 0.5
"""How long the matmul rate is measured for, once a process and device."""

_MATMUL_TYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Ceiling:
    """The rate one device's MFU is given against, and the measured rate beside it."""
    flops_per_second: float
    """The published peak where there is one, else the measured rate."""
    published: bool
    """Whether `flops_per_second` is the published peak."""
    device_name: str | None
    precision: str
    measured_gflops: float | None
    """The matmul rate measured on the device (GFLOP/s), if measured."""

    def words(self, flops_per_second: float) -> str:
        """MFU in words against each rate there is (`peaks.utilisation`)."""
        return utilisation(flops_per_second, self.measured_gflops, self.device_name,
                           self.precision)


def ceiling(device_name: str | None, precision: str,
            measured_gflops: float | None) -> Ceiling | None:
    """The device's published peak for `precision` if `peaks` knows it, else the measured
    rate; None where there is neither."""
    peak = published_peak(device_name) if device_name else None
    if peak is not None and precision in peak.tflops:
        return Ceiling(peak.tflops[precision] * 1e12, True, device_name, precision,
                       measured_gflops)
    if measured_gflops:
        return Ceiling(measured_gflops * 1e9, False, device_name, precision, measured_gflops)
    return None


def device_ceiling(device: torch.device, precision: str) -> Ceiling | None:
    """`ceiling` of this device: its name as torch gives it (a GPU's), its matmul rate
    measured once a process (`measured_matmul`)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return ceiling(name, precision, measured_matmul(str(device), precision))


@functools.cache  # the machine's property: measured once, not at every run of a process
def measured_matmul(device: str, precision: str) -> float:
    """The best dense matmul rate of `device` in `precision`, GFLOP/s, over MEASURE_SECONDS."""
    return matmul_limit(_MATMUL_TYPES[precision], device, seconds=MEASURE_SECONDS)


class FlopMeter:
    """A run's model FLOPs, counted batch by batch: the MFU of each log window and of the
    whole run (this process's steps: a resume counts from where it starts)."""

    def __init__(self, flops: BatchFlops, ceiling: Ceiling, world: int = 1):
        self.flops, self.ceiling, self.world = flops, ceiling, world
        self.window_flops = self.total_flops = self.total_seconds = 0.0

    def count(self, micro: list[dict]) -> None:
        """A step's micro-batches (this rank's; each rank's share is alike)."""
        self.window_flops += sum(self.flops(b) for b in micro) * self.world

    def window(self, seconds: float) -> float:
        """The MFU of the FLOPs counted since the last window, done in `seconds`."""
        flops, self.window_flops = self.window_flops, 0.0
        self.total_flops += flops
        self.total_seconds += seconds
        return self._mfu(flops, seconds)

    def _mfu(self, flops: float, seconds: float) -> float:
        return flops / max(seconds, 1e-9) / (self.ceiling.flops_per_second * self.world)

    @property
    def run_mfu(self) -> float | None:
        return self._mfu(self.total_flops, self.total_seconds) if self.total_seconds else None

    def run_words(self) -> str | None:
        """The whole run's MFU in words, per device, against each rate there is."""
        if not self.total_seconds:
            return None
        return self.ceiling.words(self.total_flops / self.total_seconds / self.world)


def flop_meter(flops: BatchFlops | None, device: torch.device, precision: str,
               world: int) -> FlopMeter | None:
    """The meter of a run that declares its FLOPs, on a device with a rate to set them
    against; None otherwise (no MFU figure)."""
    if flops is None:
        return None
    limit = device_ceiling(device, precision)
    return None if limit is None else FlopMeter(flops, limit, world)


__all__ = ["BatchFlops", "Ceiling", "FlopMeter", "ceiling", "device_ceiling", "flop_meter",
           "measured_matmul", "MEASURE_SECONDS"]
