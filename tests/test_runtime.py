"""The machine description and the allocator setting the training commands make."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

from bertkit import runtime
from bertkit.files import UserError


def test_physical_cores_and_allocator():
    # Hyper-threads of one core count once: never more cores than CPUs this process may use.
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= runtime.physical_cores() <= allowed
    name, better = runtime.allocator()
    assert name in ("glibc malloc", "tcmalloc", "jemalloc")
    assert better is None or better.endswith((".so.4", ".so.2"))


def test_describe_says_threads_allocator_precision_and_kernels():
    line = runtime.describe("bf16", freed_memory_kept=True)
    assert f"{torch.get_num_threads()} threads" in line and "precision bf16" in line
    assert torch.backends.cpu.get_cpu_capability() in line and "allocator" in line
    if runtime.allocator()[0] == "glibc malloc":
        assert "freed memory kept" in line


@pytest.mark.slow
def test_keeping_freed_memory_leaves_results_alone():
    """In a child process (it changes malloc for the whole process): mallopt takes effect on
    glibc, and a training step after it gives the same numbers as before it."""
    code = (
        "import torch; from bertkit import runtime\n"
        "def step():\n"
        "    torch.manual_seed(0); m = torch.nn.Linear(64, 64); x = torch.randn(512, 64)\n"
        "    m(x).pow(2).mean().backward(); return m.weight.grad.clone()\n"
        "before = step(); kept = runtime.keep_freed_memory(); after = step()\n"
        "big = torch.empty(64 << 20, dtype=torch.uint8); del big\n"
        "print(kept, torch.equal(before, after))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    kept, equal = out.stdout.split()
    assert equal == "True"
    if platform.system() == "Linux" and runtime.allocator()[0] == "glibc malloc":
        assert kept == "True"


def test_resolve_device_auto_is_cuda_when_there_is_one():
    from bertkit.runtime import resolve_device

    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu", 0)) == torch.device("cpu", 0)


@pytest.mark.parametrize("name,message", [
    ("foo", "--device foo: not a device"), ("cuda:x", "--device cuda:x: not a device"),
    ("", "--device : not a device"),
    pytest.param("cuda", "--device cuda: no cuda device available", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="this machine has CUDA")),
    pytest.param("cuda:7", "--device cuda:7: ", marks=pytest.mark.skipif(
        torch.cuda.device_count() > 7, reason="this machine has 8 GPUs")),
])
def test_a_device_this_machine_lacks_is_one_line(name, message):
    with pytest.raises(UserError) as e:
        runtime.parse_device(name)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_devices_this_machine_has():
    assert runtime.parse_device("cpu") == torch.device("cpu")
    assert runtime.parse_device("cpu:0") == torch.device("cpu", 0)
    if torch.cuda.is_available():
        assert runtime.parse_device("cuda:0") == torch.device("cuda", 0)


@pytest.mark.parametrize("ratio,precision,emulated", [
    (3.5, "bf16", False),   # AMX
    (2.1, "bf16", False),   # AVX512-BF16 (AMD Zen 4)
    (1.1, "fp32", False),   # barely faster: the casts around each matmul would eat it
    (0.5, "fp32", False),   # converted to fp32 inside the kernel (AVX-512 without BF16)
    (0.008, "fp32", True),  # software emulation (AVX2)
])
def test_precision_follows_the_measured_bf16_speedup(ratio, precision, emulated):
    chosen, why = runtime.precision_for_speedup(ratio)
    assert chosen == precision and f"{ratio:.2g}"[:3] in why
    assert ("crawl" in why) == emulated


def test_choose_precision_on_this_cpu_agrees_with_its_measurement(monkeypatch):
    monkeypatch.delenv(runtime.AUTO_PRECISION, raising=False)  # the suite may run with it set
    chosen, why = runtime.choose_precision("cpu")
    assert chosen in ("fp32", "bf16") and "bf16 matmul" in why
    assert runtime.bf16_speedup("cpu") > 0


def test_the_bf16_speedup_is_measured_once_per_process(monkeypatch):
    """The run's choice and its warning read one measurement: two timings would differ."""
    monkeypatch.delenv(runtime.AUTO_PRECISION, raising=False)
    assert runtime.bf16_speedup("cpu") == runtime.bf16_speedup(torch.device("cpu"))
    ratio = runtime.bf16_speedup("cpu")
    assert runtime.choose_precision("cpu") == runtime.precision_for_speedup(ratio)
    assert (runtime.bf16_warning("bf16", "cpu") is None) == (ratio >= runtime.EMULATED)


@pytest.mark.parametrize("name,native,precision", [("NVIDIA H100", True, "bf16"),
                                                    ("Tesla V100", False, "fp32")])
def test_on_a_gpu_auto_is_bf16_where_it_is_native(monkeypatch, name, native, precision):
    """What fine-tuning's and pretraining's `--precision auto` choose on a GPU, without
    measuring: bf16 where the GPU multiplies it natively (Ampere on). torch's
    is_bf16_supported() says yes by default where it only emulates bf16 (a V100, a T4),
    whose bf16 matmuls run far slower than fp32's."""
    monkeypatch.delenv(runtime.AUTO_PRECISION, raising=False)  # the suite may set it
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: native or including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: name)
    monkeypatch.setattr(runtime, "bf16_speedup", lambda device="cpu": pytest.fail("measured"))
    chosen, why = runtime.choose_precision(torch.device("cuda"))
    assert chosen == precision and why.startswith(name)
    assert runtime.bf16_warning(chosen, "cuda") is None


def test_asking_for_bf16_where_it_is_emulated_warns_before_the_run(monkeypatch):
    monkeypatch.setattr(runtime, "bf16_speedup", lambda device="cpu": 0.008)
    warning = runtime.bf16_warning("bf16", "cpu")
    assert warning.startswith("warning: bf16 matmul runs at 0.008x fp32")
    assert "crawl" in warning and "--precision fp32" in warning and "125x faster" in warning
    assert runtime.bf16_warning("fp32", "cpu") is None
    monkeypatch.setattr(runtime, "bf16_speedup", lambda device="cpu": 2.1)
    assert runtime.bf16_warning("bf16", "cpu") is None


def test_a_model_that_only_reads_runs_exact_on_a_cpu_unless_told(monkeypatch):
    """`--precision auto` for predict, search and embed: fp32 on a CPU without measuring,
    whatever bf16 would gain; the environment's setting wins; bf16 asked for where it is
    emulated comes with the warning."""
    monkeypatch.delenv(runtime.AUTO_PRECISION, raising=False)
    monkeypatch.setattr(runtime, "bf16_speedup", lambda device="cpu": 0.008)
    cpu = torch.device("cpu")
    assert runtime.inference_precision("auto", cpu) == ("fp32", None)
    assert runtime.inference_precision("fp32", cpu) == ("fp32", None)
    chosen, warning = runtime.inference_precision("bf16", cpu)
    assert chosen == "bf16" and warning.startswith("warning: bf16 matmul runs at 0.008x")
    monkeypatch.setenv(runtime.AUTO_PRECISION, "bf16")
    assert runtime.inference_precision("auto", cpu) == ("bf16", None)


class _Timings:
    """Fake products: seconds per dtype, the first of each type as given, bursts by call."""

    def __init__(self, fp32: float, bf16: float, first_bf16: float | None = None,
                 burst_calls: tuple = (), burst: float = 0.05):
        self.seconds = {torch.float32: fp32, torch.bfloat16: bf16}
        self.first_bf16, self.burst_calls, self.burst = first_bf16, burst_calls, burst
        self.calls = {torch.float32: 0, torch.bfloat16: 0}

    def __call__(self, dtype) -> float:
        self.calls[dtype] += 1
        n = sum(self.calls.values())
        if dtype == torch.bfloat16 and self.calls[dtype] == 1 and self.first_bf16 is not None:
            return self.first_bf16
        return self.seconds[dtype] + (self.burst if n in self.burst_calls else 0.0)


def test_the_first_bf16_product_builds_kernels_and_is_not_read_as_emulation():
    """Once seen: a busy machine took 0.3 s over its first bf16 product (oneDNN compiling the
    kernel) and a Zen 4 that multiplies bf16 2x faster than fp32 trained in fp32."""
    timings = _Timings(fp32=0.002, bf16=0.001, first_bf16=0.3)
    assert runtime.speedup_from_timings(timings) == pytest.approx(2.0)


def test_a_burst_of_other_work_slows_both_types_not_the_ratio():
    """Taken in turn, the products of both types see the same machine: a stretch of a busy
    core (here the first ten timed products, 10 ms slower each) is passed over by the best."""
    timings = _Timings(fp32=0.002, bf16=0.001, burst_calls=tuple(range(3, 13)), burst=0.01)
    assert runtime.speedup_from_timings(timings) == pytest.approx(2.0)
    assert timings.calls[torch.float32] > 10


def test_an_emulated_bf16_product_ends_the_measurement_at_once():
    timings = _Timings(fp32=0.002, bf16=0.25)
    ratio = runtime.speedup_from_timings(timings)
    assert ratio == pytest.approx(0.008)
    assert timings.calls[torch.bfloat16] == 4  # the untimed one and three timed
    assert runtime.precision_for_speedup(ratio)[0] == "fp32"


def test_one_product_of_a_starved_process_is_not_read_as_emulation():
    """A process that other work keeps off the cores for 0.15 s in its first timed bf16
    product still finds the 2x the other products show."""
    timings = _Timings(fp32=0.002, bf16=0.001, burst_calls=(4,), burst=0.15)
    assert runtime.speedup_from_timings(timings) == pytest.approx(2.0)


@pytest.fixture
def busy_process():
    """Another process that keeps a core busy while a test runs."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield child
    child.kill()
    child.wait()


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc/stat")
def test_a_busy_process_on_the_cores_is_seen_and_said_once_a_measurement(busy_process):
    import time

    cores = runtime.SharedCores(threads=2, every=0.5)
    assert cores.warning() is None  # not yet `every` seconds
    time.sleep(1.0)  # this process idles: what is busy is the other one
    warning = cores.warning()
    assert warning.startswith("warning: other processes kept ") and \
        "OMP_NUM_THREADS=1" in warning, warning
    time.sleep(0.6)
    busy, seconds = cores.others()
    assert busy >= 0.5 and 0.5 <= seconds < 5
    # one thread waits for no other: nothing to say
    one = runtime.SharedCores(threads=1, every=0.1)
    time.sleep(0.3)
    assert one.warning() is None



@pytest.mark.parametrize("value,chosen", [("bf16", "bf16"), ("FP32", "fp32"), (" bf16 ", "bf16")])
def test_the_environment_settles_what_auto_picks_on_any_device(monkeypatch, value, chosen):
    """$BERTKIT_AUTO_PRECISION: the whole suite (or a cluster's job) run as a machine with the
    other choice would run it, nothing measured."""
    monkeypatch.setenv(runtime.AUTO_PRECISION, value)
    monkeypatch.setattr(runtime, "bf16_speedup", lambda device="cpu": pytest.fail("measured"))
    for device in ("cpu", "cuda"):
        assert runtime.choose_precision(device) == (chosen, f"BERTKIT_AUTO_PRECISION={chosen}")


def test_an_empty_setting_leaves_auto_to_the_measurement(monkeypatch):
    monkeypatch.setenv(runtime.AUTO_PRECISION, "")
    assert runtime.auto_precision_override() is None
    assert runtime.choose_precision("cpu") == runtime.precision_for_speedup(
        runtime.bf16_speedup("cpu"))


def test_a_setting_that_is_no_precision_is_one_line(monkeypatch):
    monkeypatch.setenv(runtime.AUTO_PRECISION, "fp16")
    with pytest.raises(UserError, match=r"^BERTKIT_AUTO_PRECISION=fp16: not a precision "
                                        r"\(fp32 or bf16\)$"):
        runtime.choose_precision("cpu")


def test_released_memory_goes_back_to_the_kernel():
    """Buffers freed below a live one stay in glibc's heap (resident) until released."""
    code = (
        "import torch\nfrom bertkit import runtime\n"
        "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096 >> 20\n"
        "big = torch.ones(16 << 20, dtype=torch.uint8); del big\n"  # glibc raises its threshold
        "held = [torch.ones(8 << 20, dtype=torch.uint8) for _ in range(60)]\n"
        "last = held.pop(); del held\n"  # the last one pins the top of the heap
        "before = rss(); released = runtime.release_freed_memory(); after = rss()\n"
        "print(released, before - after)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    released, freed = out.stdout.split()
    if platform.system() == "Linux" and runtime.allocator()[0] == "glibc malloc":
        assert released == "True" and int(freed) > 300, out.stdout
    else:
        assert released == "False"


def test_bound_kernel_cache_sets_onednn_capacity_unless_the_user_did(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    runtime.bound_kernel_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(runtime.KERNEL_CACHE)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "7")
    runtime.bound_kernel_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "7"
