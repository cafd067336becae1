"""Batches with no text twice, for losses that use the rest of the batch as negatives.

With in-batch negatives (`bertkit.embeddings.losses.multiple_negatives_ranking_loss`), every
other example's positive is a negative for an anchor. If the same text sits in a batch twice
(the premise of two NLI pairs, a popular answer, a sentence repeated in a corpus), the loss
pushes an anchor away from a text that is in fact its positive: a false negative. So a batch
takes an example only if none of its texts (anchor, positive, negatives: compared exactly, as
sentence-transformers' NO_DUPLICATES sampler does) is in the batch already.
"""
from __future__ import annotations

from typing import Sequence

import torch


def unique_batches(examples: Sequence[Sequence[str]], batch_size: int,
                   generator: torch.Generator) -> list[list[int]]:
    """One epoch of index batches over `examples` (each the texts of one example), in an
    order drawn from `generator`, no text twice within a batch.

    Every example is in exactly one batch. The examples are taken in a shuffled order; one
    that clashes with the batch being filled waits, and the next batch takes the waiting ones
    first (oldest first), so an example is delayed, never dropped. Every batch is full
    (`batch_size` examples) except at the tail: once the shuffled order is used up, the
    examples still waiting may clash with one another (one text repeated more often than
    there are batches left), and they come as smaller batches at the end of the epoch, at
    least one example each. A caller that wants full batches only drops those.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, not {batch_size}")
    texts = [frozenset(texts) for texts in examples]  # an example never clashes with itself
    stream = iter(torch.randperm(len(texts), generator=generator).tolist())
    waiting: list[int] = []
    batches: list[list[int]] = []
    while True:
        batch: list[int] = []
        seen: set[str] = set()

        def fits(i: int) -> bool:
            if len(batch) < batch_size and seen.isdisjoint(texts[i]):
                batch.append(i)
                seen.update(texts[i])
                return True
            return False

        waiting = [i for i in waiting if not fits(i)]
        for i in stream if len(batch) < batch_size else ():
            if not fits(i):
                waiting.append(i)
            elif len(batch) == batch_size:
                break
        if not batch:
            return batches
        batches.append(batch)


__all__ = ["unique_batches"]
