"""The training loop's collectives under NCCL: NCCL takes tensors on the rank's GPU only
("No backend type associated with device type cpu"), so every tensor the loop hands to
`torch.distributed` must be on the run's device. The meta device stands in for a GPU here."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from bertkit.config import TrainConfig
from bertkit.training import loop, resume, run_state


class _Reduced(Exception):
    """Raised by the fake all-reduce once it has seen its tensor (a meta tensor has no value
    to read back)."""


@pytest.fixture
def collectives(monkeypatch) -> list[torch.device]:
    """The device of each tensor given to dist.all_reduce."""
    seen: list[torch.device] = []

    def all_reduce(t, *args, **kwargs):
        seen.append(t.device)
        raise _Reduced

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    return seen


def _run(device: torch.device, **cfg) -> SimpleNamespace:
    return SimpleNamespace(cfg=TrainConfig(max_steps=10, log_every=1, **cfg), device=device,
                           distributed=True, rank=0, world=2, main=True)


def test_the_stop_flag_is_reduced_on_the_runs_device(collectives):
    run = _run(torch.device("meta"))
    with pytest.raises(_Reduced):
        loop._check_stop(run, run_state.State(step=1), SimpleNamespace(signum=None))
    assert collectives == [torch.device("meta")]


def test_the_target_count_is_reduced_on_the_runs_device(collectives):
    run = _run(torch.device("meta"))
    run.target_count = lambda batch: batch["n"]
    with pytest.raises(_Reduced):
        loop._micro_weights(run, [{"n": torch.tensor(3, device="meta")}])
    assert collectives == [torch.device("meta")]


def test_a_rank_the_checkpoint_lacked_seeds_its_gpu_generators_too(monkeypatch, tmp_path):
    """Dropout on a GPU draws from the CUDA generators: a rank new to a run seeds them as it
    seeds torch's (seed, rank, step), not left at torch's default seed, the same on every
    new rank and for every --seed."""
    seeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded.append)
    run = _run(torch.device("meta"))
    run.rank, run.world = 2, 3
    saved = {"rng": {"torch": torch.get_rng_state(), "cuda": [torch.get_rng_state()]},
             "feed": {"epoch": 0, "index": 5}}
    rng, _ = resume.rank_state(run, tmp_path, [saved, saved], step=5)
    assert "cuda" not in rng and len(seeded) == 1
    assert torch.equal(rng["torch"], torch.Generator().manual_seed(seeded[0]).get_state())
