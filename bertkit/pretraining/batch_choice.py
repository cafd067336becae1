"""`pretrain --batch-size auto`: the batch a fresh run on a GPU measures before its clock
starts (`bertkit.training.batch_probe`: 16 doubled while a few timed steps' tokens/s rise and
fit in memory), and the batch a resumed run keeps, the one its checkpoint recorded.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from bertkit.config import TrainConfig
from bertkit.files import UserError
from bertkit.pretraining.examples import PretrainingBatches
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.shards import verify_shards
from bertkit.runtime import choose_precision
from bertkit.training.batch_probe import START, choose_batch_size, timed_steps
from bertkit.training.checkpoint import saved_fingerprint


def recorded_batch(latest: Path) -> int:
    """The batch the checkpoint `latest` recorded, which batch auto resumes with: a resume
    trains on as it began, not on a batch measured again (which could differ)."""
    recorded = saved_fingerprint(latest).get("batch_size")
    if not isinstance(recorded, int) or isinstance(recorded, bool) or recorded < 1:
        raise UserError(f"{latest}: the checkpoint records no batch size to resume with; "
                        f"give --batch-size N")
    return recorded


def measured_batch(model: nn.Module, objective: Objective, data: Path, data_kwargs: dict,
                   train: TrainConfig, device: torch.device, ranks: tuple[int, int]) -> int:
    """Batch auto measured on `device`: steps of `model`'s copy on batches of `data` (the
    first corpus) as `data_kwargs` cut them (at --seq-len, the last phase's, the longest
    rows), in the precision the run will use; said in one line. Under torchrun each rank
    measures its share of each global batch (a multiple of the ranks) and the ranks take the
    smallest choice."""
    rank, world = ranks
    cfg = train.replace(precision=choose_precision(device)[0] if train.precision == "auto"
                        else train.precision)

    if rank == 0:  # once here, not again for each size tried
        verify_shards(data)

    def batches_of(size: int):
        return PretrainingBatches(data, batch_size=size // world, split="train",
                                  seed=train.seed, rank=rank, world_size=world, prefetch=0,
                                  verify=False, **data_kwargs)

    choice = choose_batch_size(timed_steps(model, objective.loss, batches_of, cfg, device),
                               start=world * -(-START // world))
    size = choice.size
    if world > 1:
        agreed = torch.tensor([size], device=device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
        size = int(agreed.item())
    if rank == 0:
        agreed_note = f"; the smallest of {world} ranks' choices: {size}" if world > 1 else ""
        print(choice.line() + agreed_note, file=sys.stderr)
    return size


__all__ = ["measured_batch", "recorded_batch"]
