"""pretrain on two GPUs under torchrun (NCCL), for the next machine with two or more: every
collective the loop makes (the log steps' all-reduces, the evaluation's broadcast, the
checkpoint's gather, the barriers) on the ranks' GPUs, then a resume of that run on one GPU
(its checkpoint holds each rank's CUDA generators). Skips with fewer than two GPUs: two ranks
on one GPU are refused by NCCL."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

RUN = ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8", "--log-every", "2",
       "--eval-every", "4", "--eval-batches", "2", "--save-every", "4", "--dist-timeout", "120",
       "--device", "cuda", "--precision", "bf16", "--no-compile"]


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _pretrain(data: Path, out: Path, steps: int, *more: str) -> list[str]:
    return ["-m", "bertkit.cli", "pretrain", "--data", str(data), "--out", str(out), *RUN,
            "--max-steps", str(steps), *more]


def test_two_gpus_under_nccl_then_a_resume_on_one(prepared, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", *_pretrain(prepared, out, 8)],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "checkpoints" / "step-00000008").is_dir()
    done = subprocess.run([sys.executable, *_pretrain(prepared, out, 12, "--resume")],
                          env=dict(_env(), CUDA_VISIBLE_DEVICES="0"), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "checkpoints" / "step-00000012").is_dir()
