"""The machine a run is on: threads, the memory allocator, and one line that says what a run
used (printed by the training commands and by every `bench/` script).

Training on a CPU frees and re-allocates the same large buffers every step (activations, the
[N, V] vocabulary gradient, the dense word-embedding gradient). glibc malloc hands buffers over
128 kB back to the kernel at once and page-faults them in again on the next step, so a
stock step can spend as much time in the kernel as in the matmuls. Two remedies, both here:
`keep_freed_memory()` tells glibc to keep what it frees (in-process, nothing to install), and
`allocator()` finds tcmalloc or jemalloc for the user to preload, as
`torch.backends.xeon.run_cpu` does.

A long encoding (mine, index) meets the opposite: buffers of ever-changing sizes and shapes.
`release_freed_memory()` hands freed memory back between chunks, and `bound_kernel_cache()`
keeps oneDNN from holding a kernel for every shape it has met.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from bertkit.config import ConfigError, parse_minutes
from bertkit.files import UserError

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers


def parse_device(name: str | torch.device, flag: str = "--device") -> torch.device:
    """The device `name` spells, if this machine has it; else a one-line UserError naming it
    (not a device, no such backend, an index past the last device). Commands check their
    device with this before any work starts."""
    if isinstance(name, torch.device):
        return name
    if name == "auto":
        return resolve_device(name)
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(f"{flag} {name}: not a device (cpu, cuda, cuda:1, mps, ...)") from None
    if device.type == "cpu":
        return device
    backend = getattr(torch, device.type, None)
    available = getattr(backend, "is_available", None)
    if not (callable(available) and available()):
        raise UserError(f"{flag} {name}: no {device.type} device available on this machine")
    count = getattr(backend, "device_count", None)
    if device.index is not None and callable(count) and device.index >= count():
        raise UserError(f"{flag} {name}: there are {count()} {device.type} devices on this "
                        f"machine (0 to {count() - 1})")
    return device


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads of one core count once)."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in allowed:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(siblings.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def allocator() -> tuple[str, str | None]:
    """(the malloc in use, a tcmalloc / jemalloc library to preload when it is glibc's)."""
    preload = os.environ.get("LD_PRELOAD", "")
    for name in ("tcmalloc", "jemalloc"):
        if name in preload:
            return name, None
    for pattern in ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libjemalloc.so.2"):
        for root in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                     "/usr/lib", "/usr/local/lib", sys.prefix + "/lib"):
            if found := glob.glob(f"{root}/{pattern}"):
                return "glibc malloc", found[0]
    return "glibc malloc", None


def keep_freed_memory() -> bool:
    """Have glibc malloc keep freed memory for reuse instead of returning it to the kernel
    (mmap threshold 1 GiB, no trimming). True if it took effect; a no-op under tcmalloc /
    jemalloc or off glibc. The process keeps its peak heap size, which a training run reaches
    in its first steps anyway."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and \
        bool(libc.mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1))


KERNEL_CACHE = 64
"""oneDNN primitives kept for reuse by a long encoding (`bound_kernel_cache`)."""


def bound_kernel_cache(capacity: int = KERNEL_CACHE) -> None:
    """Keep at most `capacity` oneDNN primitives (PyTorch's CPU kernels for a shape) unless
    ONEDNN_PRIMITIVE_CACHE_CAPACITY says otherwise. Encoding a corpus in length-sorted batches
    meets a new shape every few batches; oneDNN's default cache of 1,024 holds each one's
    primitive, and the process grows by tens of megabytes every few thousand texts. With 64
    it stays flat at the same speed. Read when the first primitive is made: call it before
    the first forward pass. A decision of the entry point: the library never calls it."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def release_freed_memory() -> bool:
    """Hand the memory glibc malloc holds free back to the kernel (`malloc_trim(0)`). Encoding
    a large corpus batch by batch frees buffers of every size; glibc raises its mmap threshold
    as they come and go and keeps them in a heap that fragments, so a process that holds no
    more than a few hundred megabytes of vectors grows by hundreds of megabytes every few
    thousand texts. Called between chunks of a long encoding, it keeps the process near what
    it holds. True if it ran; a no-op under tcmalloc / jemalloc or off glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def _glibc():
    """The C library when glibc's malloc is this process's allocator (Linux, no tcmalloc or
    jemalloc preloaded), else None."""
    if allocator()[0] != "glibc malloc" or platform.system() != "Linux":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo on Linux), else what `platform` knows."""
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").exists():
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    return cpu


def describe(precision: str | None = None, freed_memory_kept: bool = False) -> str:
    """One line: torch, python, threads, allocator, precision, the CPU kernels torch takes.
    `freed_memory_kept`: what `keep_freed_memory()` returned."""
    name, _ = allocator()
    if freed_memory_kept:
        name += " (freed memory kept)"
    cpu = cpu_name()
    parts = [f"torch {torch.__version__}", f"python {platform.python_version()}",
             f"{torch.get_num_threads()} threads ({physical_cores()} physical cores)",
             f"allocator {name}"]
    if precision:
        parts.append(f"precision {precision}")
    parts += [f"CPU kernels {torch.backends.cpu.get_cpu_capability()}", cpu]
    if torch.cuda.is_available():
        parts.append(f"GPU {torch.cuda.get_device_name()}")
    return ", ".join(parts)


def busy_cpu_seconds(cpus: set[int] | None = None) -> float | None:
    """Seconds the CPUs `cpus` (none: those this process may run on) have spent busy since
    boot, by every process (/proc/stat); None where there is no /proc/stat."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    cpus = set(os.sched_getaffinity(0)) if cpus is None else cpus  # Linux, as /proc/stat is
    ticks = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
            ticks += user + nice + system + irq + softirq + steal
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class SharedCores:
    """Whether other processes compute on this one's cores. An op that torch splits over N
    threads ends when its slowest part does, so a core that another process also wants
    slows every op by far more than that core's share: on a 2-core AMD EPYC, 30 steps of
    `pretrain` (mini) trained 1,227 tokens/s on 2 threads beside one busy process and 1,679
    on 1 thread (3,150 alone); beside two, 465 against 899. bertkit does not change the
    thread count itself (a run's numbers are reproducible only at a fixed count): it says
    so, once."""
    threads: int
    """The threads this process computes with."""
    every: float = 10.0
    """Seconds a measurement spans at the least."""
    _since: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        self._since = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        busy = busy_cpu_seconds()
        return None if busy is None else (time.monotonic(), time.process_time(), busy)

    def others(self) -> tuple[float, float] | None:
        """(cores the other processes kept busy on average, over how many seconds) since the
        last measurement, which this one ends; None before `every` seconds or off Linux."""
        if self._since is None or time.monotonic() - self._since[0] < self.every:
            return None  # /proc/stat is read at most once a measurement
        now = self._sample()
        if now is None:
            return None
        (wall0, own0, busy0), (wall1, own1, busy1) = self._since, now
        self._since = now
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall1 - wall0), wall1 - wall0

    def warning(self) -> str | None:
        """A line when other processes kept half a core or more busy over the last
        measurement and this one computes with more than one thread, else None."""
        measured = self.others() if self.threads > 1 else None
        if measured is None or measured[0] < 0.5:
            return None
        busy, seconds = measured
        fewer = max(1, self.threads - math.ceil(busy - 0.25))
        return (f"warning: other processes kept {busy:.1f} of the {len(os.sched_getaffinity(0))} "
                f"CPUs this run computes on busy over the last {seconds:.0f} s: each op waits "
                f"for its slowest of {self.threads} threads, so while they run this trains "
                f"faster with OMP_NUM_THREADS={fewer} (or with the other work stopped)")


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""The tensor type of each precision name that runs in it (fp16 only autocasts)."""


def matmul_limit(dtype: torch.dtype, device: torch.device | str = "cpu",
                 seconds: float = 2.0) -> float:
    """The best dense matmul rate in GFLOP/s (square 1024 on a CPU, 8192 on a GPU): the
    ceiling that model FLOP utilisation (MFU) is measured against."""
    device = torch.device(device)
    n = 1024 if device.type == "cpu" else 8192
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))

    def timed() -> float:
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    timed()  # the first product pays for allocation and the kernel's choice
    best, end = 0.0, time.perf_counter() + seconds
    while not best or time.perf_counter() < end:  # one product at least: bf16 emulated in
        best = max(best, 2 * n ** 3 / timed() / 1e9)  # software takes seconds each
    return best


def bf16_speedup(device: torch.device | str = "cpu") -> float:
    """How many times faster this CPU multiplies bf16 than fp32 (512 x 512 products, the best
    of each over 0.2 s of them taken in turn: `speedup_from_timings`): 2 to 4 where it has
    AVX512-BF16 or AMX, about 0.5 where it converts, about 0.01 where it emulates bf16 in
    software (AVX2).

    Measured once per process and device: it is a property of the machine, and a second
    measurement taken while something else loads the cores could contradict the first (a
    run that chose bf16 by measurement, then warned that bf16 would crawl)."""
    return _measured_bf16_speedup(str(torch.device(device)))


@functools.cache
def _measured_bf16_speedup(device: str) -> float:
    n = 512
    operands = {dtype: torch.randn(n, n, device=device).to(dtype)
                for dtype in (torch.float32, torch.bfloat16)}

    def product(dtype: torch.dtype) -> float:
        a = operands[dtype]
        start = time.perf_counter()
        a @ a
        return time.perf_counter() - start

    return speedup_from_timings(product)


def speedup_from_timings(product: Callable[[torch.dtype], float], budget: float = 0.2,
                         rounds: int = 3, emulated_after: float = 0.1) -> float:
    """fp32's time over bf16's, from `product(dtype)`, the seconds one product takes.

    One product of each type first, untimed: the first builds the kernels of its type (oneDNN
    compiles them), which on a busy machine can take longer than an emulated product, and was
    once read as emulation. Then the two in turn, the best of each, for at least `rounds`
    rounds and `budget` seconds of products: taken in turn, a burst of other work on the cores
    slows a few products of both types, never all of one, and one product of a starved process
    (0.1 s off the cores) is not the best of three. Where the best bf16 product of `rounds`
    still takes over `emulated_after` seconds, bf16 is emulated beyond doubt: that ends it."""
    product(torch.float32)
    product(torch.bfloat16)
    best = {torch.float32: math.inf, torch.bfloat16: math.inf}
    spent, done = 0.0, 0
    while done < rounds or spent < budget:
        for dtype in best:
            took = product(dtype)
            best[dtype], spent = min(best[dtype], took), spent + took
        done += 1
        if done >= rounds and best[torch.bfloat16] > emulated_after:
            break
    return best[torch.float32] / best[torch.bfloat16]


EMULATED = 0.2
"""A bf16 speedup below this is software emulation: training would crawl."""


def precision_for_speedup(ratio: float) -> tuple[str, str]:
    """("bf16" or "fp32", why) for a CPU whose bf16 matmuls run `ratio` times fp32's: bf16
    only where it pays clearly (autocast adds casts around every matmul)."""
    if ratio >= 1.3:
        return "bf16", f"bf16 matmul {ratio:.1f}x fp32 on this CPU"
    return "fp32", f"bf16 matmul {ratio:.2g}x fp32 on this CPU" + (
        " (emulated: it would crawl)" if ratio < EMULATED else "")


AUTO_PRECISION = "BERTKIT_AUTO_PRECISION"
"""The environment variable that settles what `--precision auto` picks, fp32 or bf16, without
measuring: one setting for every command of a session (a cluster's job script, a test suite
run as a machine with the other choice would run it)."""


def auto_precision_override() -> str | None:
    """"fp32" or "bf16" as $BERTKIT_AUTO_PRECISION says, None where it is unset or empty; any
    other value is a one-line error."""
    value = os.environ.get(AUTO_PRECISION, "").strip().lower()
    if not value:
        return None
    if value not in DTYPES:
        raise UserError(f"{AUTO_PRECISION}={value}: not a precision (fp32 or bf16)")
    return value


MAX_TIME = "BERTKIT_MAX_TIME"
"""The environment variable that caps the wall time of every training run (pretraining,
fine-tuning, the road's models, the demo), a duration as --max-time takes it ("20s", "2m"): a
run stops at the smaller of its own budget and this, and a run of steps or epochs alone stops
there too. For a quick look at every command, a test suite, a tutorial run as written."""


def max_time_cap() -> tuple[float, str] | None:
    """(minutes, the value as set) of $BERTKIT_MAX_TIME, None where it is unset or empty; a
    value that is no duration is a one-line error."""
    value = os.environ.get(MAX_TIME, "").strip()
    if not value:
        return None
    try:
        return parse_minutes(value, f"{MAX_TIME}="), value
    except ConfigError as e:
        raise UserError(str(e).replace("= ", "=", 1)) from None


def autocast(device: torch.device, precision: str):
    """Autocast to the precision a run trains in ("bf16", "fp16"); none for "fp32"."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def choose_precision(device: torch.device | str) -> tuple[str, str]:
    """("bf16" or "fp32", why) for training on `device`, measured, not assumed: a CPU without
    native bf16 emulates it a hundred times slower than fp32 (AVX2), one with AVX512-BF16 or
    AMX multiplies it several times faster. On a GPU: bf16 where it is native (Ampere on).
    $BERTKIT_AUTO_PRECISION, where set, is the choice on any device."""
    if (forced := auto_precision_override()) is not None:
        return forced, f"{AUTO_PRECISION}={forced}"
    device = torch.device(device)
    if device.type == "cuda":
        # not by default: torch then says yes for a GPU that emulates bf16 (V100, T4), where
        # bf16 matmuls run far slower than fp32's
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return "bf16", f"{torch.cuda.get_device_name(device)} supports bf16"
        return "fp32", f"{torch.cuda.get_device_name(device)} has no native bf16"
    if device.type != "cpu":
        return "fp32", f"no bf16 measurement on {device.type}"
    return precision_for_speedup(bf16_speedup(device))


INFERENCE_PRECISIONS = ("fp32", "bf16")
"""What a model that only reads runs in: fp32 (exact), or the model under bf16 autocast with
its outputs read back in fp32."""


def check_inference_precision(precision: str) -> str:
    """`precision` when it is one of INFERENCE_PRECISIONS (a programming error otherwise: the
    command lines offer only those and auto, which `inference_precision` resolves)."""
    if precision not in INFERENCE_PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(INFERENCE_PRECISIONS)}")
    return precision


def inference_precision(requested: str, device: torch.device) -> tuple[str, str | None]:
    """(precision, warning or None) for a model that only reads: `auto` is fp32 on a CPU
    (exact) unless $BERTKIT_AUTO_PRECISION says otherwise, and bf16 on a GPU that runs it
    natively; bf16 asked for on a CPU that emulates it comes with `bf16_warning`'s line."""
    if requested == "auto":
        return (auto_precision_override() or (choose_precision(device)[0]
                                              if device.type == "cuda" else "fp32")), None
    return requested, bf16_warning(requested, device)


def warned_precision(requested: str, device: torch.device) -> str:
    """`inference_precision`'s choice for a command, its warning (if any) on stderr first."""
    precision, warning = inference_precision(requested, device)
    if warning:
        print(warning, file=sys.stderr)
    return precision


def bf16_warning(precision: str, device: torch.device | str) -> str | None:
    """A one-line warning when `precision` is bf16 on a CPU that emulates it (measured), so a
    user who asked for bf16 hears before the first step that fp32 would be ~100x faster."""
    if precision != "bf16" or torch.device(device).type != "cpu":
        return None
    ratio = bf16_speedup(device)
    if ratio >= EMULATED:
        return None
    return (f"warning: bf16 matmul runs at {ratio:.2g}x fp32 on this CPU ({cpu_name()}, "
            f"emulated): this run will crawl; --precision fp32 or auto is about "
            f"{1 / ratio:.0f}x faster")


def reads_are_free(t: torch.Tensor) -> bool:
    """Whether the host may look at a value of `t` (`bool(t.all())`, a length) without
    waiting: on a CPU it may; on a GPU it waits for every queued kernel, so a step that runs
    there never looks, and takes the path that needs no answer."""
    return t.device.type == "cpu"


def compiles_for(device: torch.device) -> bool:
    """Whether torch.compile can build kernels for `device` here: a GPU needs Triton, which
    torch's Linux CUDA wheels bring and its Windows ones do not; the CPU a C++ compiler."""
    import importlib.util
    import shutil

    if device.type == "cuda":
        return importlib.util.find_spec("triton") is not None
    compilers = [os.environ.get("CXX", ""), "c++", "g++", "clang++", "cl"]
    return any(name and shutil.which(name) for name in compilers)


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """"auto": the CUDA device when there is one, else the CPU; any other name as
    `parse_device` reads it (a one-line UserError for a device this machine lacks)."""
    if isinstance(name, str) and name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return parse_device(name)


__all__ = ["DTYPES", "INFERENCE_PRECISIONS", "check_inference_precision", "warned_precision", "SharedCores", "busy_cpu_seconds", "parse_device", "resolve_device", "compiles_for", "reads_are_free", "physical_cores", "allocator",
           "keep_freed_memory", "bound_kernel_cache", "release_freed_memory", "describe",
           "cpu_name", "matmul_limit",
           "choose_precision", "inference_precision", "autocast",
           "MAX_TIME", "max_time_cap"]
