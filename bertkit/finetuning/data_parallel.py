"""Fine-tuning under `torchrun`, data-parallel: the ranks joined around a run
(`bertkit.training.distributed`, as pretraining joins them), each on its own device, and the
run's training examples checked against their number.

    with ranks_joined(cfg.device, cfg.dist_timeout, {"--train": train_path}) as device:
        ...   # finetune: every rank builds the same plan and batches and keeps its share

What each rank does is decided elsewhere: the global batch of --batch-size examples split into
the ranks' shares (`bertkit.finetuning.batches`), the shares' losses weighted by their targets
and the gradients averaged by DDP (`bertkit.training.loop`), dev evaluated and the model, its
card, metrics and checkpoints written by rank 0 alone.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path


from bertkit.files import UserError
from bertkit.finetuning.input_sources import STDIN
from bertkit.training.distributed import process_group, rank_device


@contextlib.contextmanager
def ranks_joined(device: str, timeout: float, sources: dict):
    """Under torchrun (WORLD_SIZE above 1): this rank's device (`rank_device`: its
    LOCAL_RANK GPU for auto and cuda), in the process group joined for the block and left
    after it; a collective whose peer is gone ends in one line (`peer_failure`); the data
    `sources` checked first (`check_sources`). In one process: None, and nothing is joined."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield None
        return
    check_sources(sources)
    mine = rank_device(device)
    with process_group(mine, timeout):
        yield mine


def check_sources(sources: dict) -> None:
    """Under torchrun every rank reads the data itself: standard input, which one rank would
    drain before the others, is refused (`sources`: flag -> what it was given)."""
    for flag, source in sources.items():
        if isinstance(source, (str, Path)) and str(source) == STDIN:
            raise UserError(f"{flag} -: under torchrun every process reads the data itself; "
                            f"give a file")


def check_ranks(count: int, world: int, name: str) -> None:
    """Refuse more processes than training examples: a rank would have no row to train on in
    any step."""
    if world > count:
        raise UserError(f"{name}: {count} training example(s) for {world} processes: each "
                        f"process needs one; run fewer processes (torchrun --nproc_per_node)")


__all__ = ["ranks_joined", "check_sources", "check_ranks"]
