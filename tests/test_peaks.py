from bertkit.peaks import PEAKS, published_peak, utilisation


def test_a_device_is_found_by_the_name_torch_gives_it_most_specific_first():
    assert published_peak("NVIDIA H100 80GB HBM3").name == "NVIDIA H100 SXM"
    assert published_peak("NVIDIA H100 PCIe").name == "NVIDIA H100 PCIe"
    assert published_peak("NVIDIA H100 NVL").name == "NVIDIA H100 NVL"
    assert published_peak("NVIDIA H200").tflops["bf16"] == 989.0
    assert published_peak("NVIDIA L40S").name == "NVIDIA L40S"  # not L4's
    assert published_peak("Intel Arc A770") is None


def test_no_table_key_is_shadowed_by_an_earlier_one():
    keys = [key for key, _ in PEAKS]
    for i, key in enumerate(keys):
        assert not any(earlier.lower() in key.lower() for earlier in keys[:i]), key


def test_mfu_against_the_specification_and_the_measured_rate():
    line = utilisation(494.5e12, 800.0e3, "NVIDIA H200", "bf16")
    assert "50.0% MFU of the NVIDIA H200's 989 TFLOP/s bf16" in line
    assert "61.8% of the 800,000 GFLOP/s bf16 matmul rate measured here" in line


def test_an_unknown_device_or_precision_gets_the_measured_rate_only():
    assert utilisation(1e11, 200.0, "AMD EPYC", "fp32") == \
        "50.0% of the 200 GFLOP/s fp32 matmul rate measured here"
    assert "MFU of" not in utilisation(1e12, 100.0, "NVIDIA T4", "bf16")  # no bf16 on a T4
    assert utilisation(1e12, None, None, "fp32").startswith("MFU unknown")
