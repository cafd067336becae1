"""One epoch after another of a task's training batches, in the task's order, resumable:
what the recipe (`bertkit.finetuning.recipe`) hands the training loop."""
from __future__ import annotations

import torch

from bertkit.finetuning.inputs import Item
from bertkit.finetuning.task import Task


class EpochBatches:
    """Shuffled batches in the task's order (`Task.batch_order`: length-bucketed), a new
    order each epoch, each batch made by `Task.training_batch` with a generator of its own;
    resumable."""

    def __init__(self, items: list[Item], task: Task, batch_size: int, seed: int):
        self.items, self.task, self.batch_size, self.seed = items, task, batch_size, seed
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
            yield self.task.training_batch([self.items[i] for i in idx],
                                           torch.Generator().manual_seed(seed))
        self.epoch, self.served = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "served": self.served}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.served = state["epoch"], state["served"]


__all__ = ["EpochBatches"]
