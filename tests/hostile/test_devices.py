"""A --device this machine lacks, in every command that takes one: one line naming it, exit 2,
before any work (nothing written, not even the output directory)."""
from __future__ import annotations

import os

import pytest
import torch


def _commands(world, out):
    return {
        "embed": ["embed", "--model", world / "model", "--input", world / "lines.txt",
                  "--out", out / "v.npy"],
        "pretrain": ["pretrain", "--data", world / "data", "--preset", "tiny", "--seq-len", "32",
                     "--max-steps", "1", "--out", out / "run"],
        "finetune": ["finetune", "classify", "--model", world / "model", "--train",
                     world / "train.jsonl", "--out", out / "clf"],
        "fill-mask": ["fill-mask", "--model", world / "model", "the [MASK] sat"],
    }


BAD = ["foo", "cuda:x", "mps", "cuda", "cuda:7"]


def _expected(device: str) -> str:
    kind = device.split(":")[0]
    if device in ("foo", "cuda:x"):
        return "not a device"
    if kind == "mps" or not torch.cuda.is_available():
        return f"no {kind} device available"
    return f"there are {torch.cuda.device_count()} cuda devices"


@pytest.mark.parametrize("command", ["embed", "pretrain", "finetune", "fill-mask"])
@pytest.mark.parametrize("device", BAD)
def test_a_device_this_machine_lacks(command, device, tmp_path, world, tools, capsys):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    out = tmp_path / "out"
    code, err = tools.cli(capsys, *_commands(world, out)[command], "--device", device)
    line = tools.assert_one_error(code, err, f"--device {device}")
    assert _expected(device) in line
    assert not out.exists() or os.listdir(out) == []
