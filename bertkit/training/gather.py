"""Every rank's rows gathered into one tensor, with gradients: what a loss over a batch's other
items (in-batch negatives, CoSENT's pairs) needs under data parallelism, so that each rank's
share of the global batch meets the rows of all the others (sentence-transformers'
`gather_across_devices`).

    vectors = gather_rows(local, count)   # [sum of the ranks' counts, D], rank 0's rows first

Every rank computes the loss of the whole global batch from the gathered rows. The backward of
the gather sums the gradients that every rank's loss gives a row (an all-reduce) and hands each
rank those of its own rows: with DDP averaging the ranks' gradients, and the ranks' loss
weights summing to the number of ranks (`training.loop`'s target counts do), each parameter's
gradient is that of one process's loss over the whole batch. The ranks' shares may differ in
size (a batch that does not split evenly); a rank may give no rows at all (`count` 0: a stand-in
row it ran only to take part). Outside a process group the rows are returned as they are.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


class _GatherRows(torch.autograd.Function):
    """all_gather forward, the summed gradient of this rank's rows backward."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, count: int, counts: list[int]):
        rank = dist.get_rank()
        ctx.rows, ctx.counts, ctx.rank = rows.shape[0], counts, rank
        padded = rows.new_zeros((max(counts), *rows.shape[1:]))
        padded[:count] = rows[:count]
        parts = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(parts, padded)
        return torch.cat([part[:n] for part, n in zip(parts, counts)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)  # every rank's loss reads every row: the sum of their gradients
        start = sum(ctx.counts[:ctx.rank])
        mine = grad[start:start + ctx.counts[ctx.rank]]
        out = mine.new_zeros((ctx.rows, *mine.shape[1:]))  # a stand-in's rows learn nothing
        out[:mine.shape[0]] = mine
        return out, None, None


def gather_rows(rows: torch.Tensor, count: int | None = None) -> torch.Tensor:
    """The first `count` rows of `rows` (all of them: None) from every rank, rank 0's first,
    in float32 at least (gloo gathers no bfloat16, and the losses read them in float32);
    gradients flow back to each rank's own rows. `rows` as it is outside a process group."""
    count = rows.shape[0] if count is None else int(count)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return rows[:count]
    rows = rows.to(torch.promote_types(rows.dtype, torch.float32)).contiguous()
    counts = torch.tensor([count], device=rows.device)
    everyone = [torch.zeros_like(counts) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, counts)
    return _GatherRows.apply(rows, count, [int(c) for c in torch.cat(everyone).tolist()])


__all__ = ["gather_rows"]
