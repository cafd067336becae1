"""The dense matmul peaks that accelerators' makers publish, so that a model FLOP utilisation
(MFU) can be given against the specification, the figure papers and other libraries quote,
as well as against the rate measured on the machine (`runtime.matmul_limit`).

Dense peaks only: the "with sparsity" figures of the data sheets are twice these and no
encoder reaches them. fp32 is the plain (non-tensor-core) rate, which is what torch's fp32
matmuls run at unless TF32 is allowed. A device that is not in the table has no specification
here: its MFU is given against the measured rate alone, never against a guess.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    """A device's published dense peaks, TFLOP/s per precision, and where they come from."""

    name: str
    tflops: dict[str, float]
    source: str


# Matched against torch.cuda.get_device_name(), most specific first ("H100 NVL" before "H100").
PEAKS: tuple[tuple[str, Peak], ...] = (
    ("H200", Peak("NVIDIA H200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
                  "NVIDIA H200 Tensor Core GPU data sheet (SXM)")),
    ("H100 NVL", Peak("NVIDIA H100 NVL", {"bf16": 835.0, "fp16": 835.0, "fp32": 60.0},
                      "NVIDIA H100 data sheet (NVL)")),
    ("H100 PCIe", Peak("NVIDIA H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0},
                       "NVIDIA H100 data sheet (PCIe)")),
    ("H100", Peak("NVIDIA H100 SXM", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
                  "NVIDIA H100 data sheet (SXM)")),
    ("A100", Peak("NVIDIA A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
                  "NVIDIA A100 Tensor Core GPU data sheet")),
    ("L40S", Peak("NVIDIA L40S", {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6},
                  "NVIDIA L40S data sheet")),
    ("L4", Peak("NVIDIA L4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3},
                "NVIDIA L4 Tensor Core GPU data sheet")),
    ("V100", Peak("NVIDIA V100 SXM2", {"fp16": 125.0, "fp32": 15.7},
                  "NVIDIA V100 data sheet (SXM2)")),
    ("T4", Peak("NVIDIA T4", {"fp16": 65.0, "fp32": 8.1}, "NVIDIA T4 data sheet")),
    ("MI300X", Peak("AMD Instinct MI300X", {"bf16": 1307.4, "fp16": 1307.4, "fp32": 163.4},
                    "AMD Instinct MI300X data sheet")),
)


def published_peak(device_name: str) -> Peak | None:
    """The table's entry for a device as torch names it ("NVIDIA H100 80GB HBM3"), or None."""
    for key, peak in PEAKS:
        if key.lower() in device_name.lower():
            return peak
    return None


def utilisation(flops_per_second: float, measured_gflops: float | None,
                device_name: str | None, precision: str) -> str:
    """MFU in words: against the published peak where the device has one, and against the
    measured matmul rate where one was measured ("47.7% MFU of the H200's 989 TFLOP/s bf16,
    58.1% of the 812 measured")."""
    parts = []
    peak = published_peak(device_name) if device_name else None
    if peak is not None and precision in peak.tflops:
        spec = peak.tflops[precision] * 1e12
        parts.append(f"{flops_per_second / spec:.1%} MFU of the {peak.name}'s "
                     f"{peak.tflops[precision]:,.0f} TFLOP/s {precision} (specification)")
    if measured_gflops:
        share = flops_per_second / (measured_gflops * 1e9)
        parts.append(f"{share:.1%} of the {measured_gflops:,.0f} GFLOP/s {precision} matmul "
                     f"rate measured here")
    return "; ".join(parts) if parts else "MFU unknown (no published peak, none measured)"


__all__ = ["PEAKS", "Peak", "published_peak", "utilisation"]
