"""How the embedder runs its batches: one padded batch and the pooling it feeds (`Task`),
tasks run on several threads at once (`parallel_map`), host arrays copied to the device without
waiting (`on_device`), and a batch's pooled positions reduced into its rows on the device
(`reduce_rows`; `reduce_groups` for the token vectors of one input), for
`bertkit.embeddings.embedder`.
"""
from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch


@dataclass
class Task:
    """One padded batch and the pooling it feeds."""

    ids: np.ndarray
    types: np.ndarray
    mask: np.ndarray
    """[B, T] token ids, segment ids, 1 = real token."""
    flat: np.ndarray
    """[P] positions (into the flattened B*T) that are pooled."""
    local: np.ndarray
    """[P] which of this batch's output rows each position adds to (ascending)."""
    rank: np.ndarray
    """[P] each position's place within its row's group: 0 for the first."""
    rows: np.ndarray
    """[R] the output rows, as indices into the whole result."""
    size: int
    """Number of texts in the batch."""


def parallel_map(fn, tasks: Iterator, workers: int) -> Iterator:
    """fn over tasks on `workers` threads, each limited to one torch thread (torch releases
    the GIL inside its kernels); results in completion order, at most 2 x workers in flight."""
    if workers == 1:
        yield from map(fn, tasks)
        return
    threads = torch.get_num_threads()
    try:
        with ThreadPoolExecutor(workers, initializer=torch.set_num_threads,
                                initargs=(1,)) as pool:
            pending: set = set()
            for task in tasks:
                pending.add(pool.submit(fn, task))
                if len(pending) >= 2 * workers:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    yield from (f.result() for f in done)
            for f in pending:
                yield f.result()
    finally:
        # torch also records the workers' count as the default for threads started later.
        torch.set_num_threads(threads)


def on_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on `device`, the copy queued rather than waited for. To a GPU it goes
    through pinned memory (torch's caching host allocator keeps the block until the copy is
    done), as a DataLoader with pin_memory does: from pageable memory the driver may wait."""
    t = torch.from_numpy(array)
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def reduce_rows(how: str, picked: torch.Tensor, local: torch.Tensor, rank: torch.Tensor,
            rows: int) -> torch.Tensor:
    """[P, W] vectors -> [rows, W]: each row's positions (`local`, ascending: a row's positions
    are consecutive) reduced as `how` says. Nothing here waits for the device: no bincount
    (it reads the largest id) and no boolean selection (its size sets a shape)."""
    width = picked.shape[1]
    counts = torch.zeros(rows, dtype=picked.dtype, device=picked.device)
    counts.index_add_(0, local, torch.ones_like(local, dtype=picked.dtype))  # [rows]
    if how == "max":  # a row with no position (a static model's text of unknowns) stays 0
        out = torch.full((rows, width), float("-inf"), dtype=picked.dtype, device=picked.device)
        out = out.scatter_reduce(0, local[:, None].expand_as(picked), picked, "amax")
        return torch.where(counts[:, None] > 0, out, torch.zeros_like(out))
    if how in ("first", "last"):
        ends = counts.long().cumsum(0)  # one past each row's last position
        at = ends - counts.long() if how == "first" else ends - 1
        present = (counts > 0).to(picked.dtype)[:, None]  # a row with no position stays 0
        return picked.index_select(0, at.clamp(0, max(picked.shape[0] - 1, 0))) * present
    weights = (rank + 1).to(picked.dtype) if how == "weightedmean" else None
    sums = torch.zeros(rows, width, dtype=picked.dtype, device=picked.device)
    sums.index_add_(0, local, picked if weights is None else picked * weights[:, None])
    if how == "mean":
        return sums / counts.clamp(min=1)[:, None]
    if how == "mean_sqrt_len_tokens":
        return sums / counts.clamp(min=1).sqrt()[:, None]
    total = torch.zeros(rows, dtype=picked.dtype, device=picked.device)
    return sums / total.index_add_(0, local, weights).clamp(min=1)[:, None]


def reduce_groups(tokens: torch.Tensor, groups: list[np.ndarray],
                  reduce: tuple[str, ...]) -> torch.Tensor:
    """[len(groups), W * len(reduce)]: each group of rows of one input's token vectors
    `tokens` [T, W] reduced as a batch's are (`reduce_rows`), the reductions side by side."""
    flat = torch.from_numpy(np.concatenate(groups))
    local = torch.from_numpy(np.repeat(np.arange(len(groups)), [len(g) for g in groups]))
    rank = torch.from_numpy(np.concatenate([np.arange(len(g)) for g in groups]))
    picked = tokens.index_select(0, flat)
    return torch.cat([reduce_rows(how, picked, local, rank, len(groups)) for how in reduce], 1)
