"""One epoch after another of a task's training batches, in the task's order, resumable:
what the recipe (`bertkit.finetuning.recipe`) hands the training loop.

Under torchrun every rank draws the same global batches (`--batch-size` examples, as one
process would) and keeps its share: rank r of W takes the rows from r * n // W to
(r + 1) * n // W of a batch of n, so the shares differ by one row at most and, laid end to end
in rank order, are the batch. A rank left without a row (the epoch's last batch shorter than
the ranks) runs a copy of the batch's last row at weight zero: DDP needs every rank in each
step. A share is made by `Task.training_batch`, which sees the whole batch: rerank's
in-batch negatives pair a share's queries with positives of every row, drawn as the whole
batch draws them. Each share carries its
count of targets (`Task.target_count`), by which the loop weighs the ranks' losses, so that W
processes take the step one process takes on the whole batch, and its number of real rows
(`rank_rows`), for losses that gather the batch back (`bertkit.training.gather`). Every
rank's position in the data is the same: a checkpoint of W ranks resumes on any number.
"""
from __future__ import annotations

import torch

from bertkit.finetuning.inputs import Item
from bertkit.finetuning.task import Task

RANK_ROWS, RANK_TARGETS = "rank_rows", "rank_targets"
"""A rank's share of a global batch: its real rows (0 for a stand-in row), its targets."""


def rank_share(batch: list[int], rank: int, world: int) -> list[int]:
    """Rank `rank`'s rows of a global batch of item indices (see the module docstring)."""
    n = len(batch)
    return batch[rank * n // world:(rank + 1) * n // world]


class EpochBatches:
    """Shuffled batches in the task's order (`Task.batch_order`: length-bucketed), a new
    order each epoch, each batch made by `Task.training_batch` with a generator of its own;
    resumable. `rank` of `world`: this process's share of each batch."""

    def __init__(self, items: list[Item], task: Task, batch_size: int, seed: int,
                 rank: int = 0, world: int = 1):
        self.items, self.task, self.batch_size, self.seed = items, task, batch_size, seed
        self.rank, self.world = rank, world
        # the pass, and how many of its batches were handed out: a new iterator (a resumed
        # run's) starts after them
        self.epoch, self.served = 0, 0

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        order = self.task.batch_order(self.items, self.batch_size, g)
        # a generator per batch, seeded up front: a resumed pass draws what the whole one did
        seeds = torch.randint(2 ** 62, (len(order),), generator=g).tolist()
        for idx, seed in zip(order[self.served:], seeds[self.served:]):
            self.served += 1  # counted from the pass's start, so a second resume lands right
            yield self._batch([self.items[i] for i in idx], torch.Generator().manual_seed(seed))
        self.epoch, self.served = self.epoch + 1, 0

    def _batch(self, items: list[Item], generator: torch.Generator) -> dict:
        if self.world == 1:
            return self.task.training_batch(items, generator)
        share = rank_share(list(range(len(items))), self.rank, self.world)
        batch = self.task.training_batch(items, generator, share or [len(items) - 1])
        batch[RANK_ROWS] = len(share)
        batch[RANK_TARGETS] = float(self.task.target_count(batch)) if share else 0.0
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "served": self.served}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.served = state["epoch"], state["served"]


def rank_targets(batch: dict) -> float:
    """A rank's share's count of targets: the training loop's `target_count` under torchrun."""
    return batch[RANK_TARGETS]


__all__ = ["EpochBatches", "rank_share", "rank_targets", "RANK_ROWS", "RANK_TARGETS"]
