"""Pretraining end to end: two gloo processes equal one process with the same global batch, a
run killed with kill -9 and resumed equals an uninterrupted one, the CLI and its bad input."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit import objectives
from bertkit.config import TrainConfig
from bertkit.train import train
from test_train import FakeBatches, concat, tiny_model

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TESTS = Path(__file__).resolve().parent


def _env(threads: int = 1) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(TESTS))
    env.pop("WORLD_SIZE", None)
    return env


class _GlobalBatches:
    """What one process sees when it takes both ranks' shares: their concatenation."""

    def __init__(self):
        self.parts = [FakeBatches(B=4, seed=0), FakeBatches(B=4, seed=1)]

    def __iter__(self):
        for a, b in zip(*self.parts):
            yield concat(a, b)


_DDP_WORKER = """
import sys
import torch.distributed as dist
from safetensors.torch import save_file
from bertkit import objectives
from bertkit.config import TrainConfig
from bertkit.train import train
from test_train import FakeBatches, tiny_model

dist.init_process_group("gloo")
rank = dist.get_rank()
model = tiny_model()
train(model, objectives.mlm_loss, FakeBatches(B=4, seed=rank),
      TrainConfig(max_steps=3, lr=1e-3, warmup_steps=0, log_every=2, grad_accum=2), sys.argv[1],
      save=lambda m, p: save_file(m.state_dict(), str(p / "params.safetensors")),
      target_count=objectives.target_count("mlm"), show_progress=False)
dist.destroy_process_group()
"""


def test_two_gloo_processes_equal_one_process_with_the_global_batch(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(_DDP_WORKER))
    done = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(script), str(tmp_path / "ddp")],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ddp = load_file(str(tmp_path / "ddp/params.safetensors"))

    model = tiny_model()
    train(model, objectives.mlm_loss, _GlobalBatches(),
          TrainConfig(max_steps=3, lr=1e-3, warmup_steps=0, log_every=2, grad_accum=2), tmp_path / "one",
          save=lambda m, p: None, target_count=objectives.target_count("mlm"),
          show_progress=False)
    start = tiny_model().state_dict()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(ddp[k], v, atol=1e-6, rtol=0, msg=k)
        if k.startswith("encoder.blocks"):
            assert not torch.equal(v, start[k])  # training moved it: the check has teeth
