"""Resuming a run: what a checkpoint records of its run (`run_fingerprint`), the checkpoint a
run goes on from, refused in one line where it may not (`check_resume`), and the state loaded
from it, on as many ranks or another number (`resume_or_seed`, `rank_state`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

from bertkit.files import UserError
from bertkit.progress import Progress
from bertkit.training.checkpoint import (GIVEN, check_fits, latest_checkpoint, load_checkpoint,
                                         model_fingerprint, set_rng_state)
from bertkit.training.run_state import Run, State
from bertkit.training.runlog import MetricsLog


def run_fingerprint(model: nn.Module, fingerprint: dict | None) -> dict:
    """What a checkpoint records of its run: the model's shapes and the caller's
    `fingerprint` (data, objective, settings), not the world size: a run resumes on any
    number of ranks (`rank_state`)."""
    return {"model": model_fingerprint(model), **(fingerprint or {})}


def check_fresh_start(out_dir: Path, resume: bool) -> Path | None:
    """The latest checkpoint under `out_dir`; without `resume`, having one is refused (a
    command that prepares its data calls this first, so that it is refused before that)."""
    latest = latest_checkpoint(Path(out_dir) / "checkpoints")
    if latest is not None and not resume:
        raise UserError(f"{out_dir}: holds checkpoints of an earlier run: resume it "
                        f"(--resume) or choose another output directory (a finished run is "
                        f"extended by --resume with a larger --max-steps)")
    return latest


def check_resume(out_dir: str | Path, resume: bool, model: nn.Module,
                 fingerprint: dict | None) -> Path | None:
    """The checkpoint a run goes on from (None: it starts afresh), refused in one line when
    the run may not: checkpoints without `resume` (`check_fresh_start`), or a checkpoint made
    for another model shape, other data or other settings (`fingerprint` as `train` takes
    it). `train` runs it before it prints or writes anything; a caller that prints first (its
    settings, the model) runs it before that, once it has built the model."""
    latest = check_fresh_start(Path(out_dir), resume)
    if latest is not None:
        check_fits(latest, run_fingerprint(model, fingerprint), ignore=("world_size", GIVEN))
    return latest


def resume_or_seed(run: Run, latest: Path | None) -> State:
    """The state of `latest`, the checkpoint to resume (`check_resume`), else a fresh one
    (and the seed)."""
    cfg, root, state = run.cfg, run.checkpoints, State()
    if latest is not None:
        saved = load_checkpoint(latest, model=run.model, optimizer=run.optimizer,
                                fingerprint=run.fingerprint, ignore=("world_size", GIVEN))
        state = State(**{k: saved[k] for k in State().saved()})
        run.scaler.load_state_dict(saved["scaler"])
        rng, feed = rank_state(run, latest, saved["ranks"], state.step)
        set_rng_state(rng)
        run.feed.load_state_dict(feed)
        state.last_checkpoint_step = state.step
    else:
        if cfg.resume and run.main:
            print(f"no checkpoint in {root}: starting afresh", file=sys.stderr)
        torch.manual_seed(cfg.seed + run.rank)  # dropout's draws; see loop._own_rng
    # first=0 and the run's whole training time: the rate and ETA count the steps before a
    # resume too, as its time budget does
    run.progress = Progress("train", cfg.max_steps, "steps", rate=False,
                            time_limit=None if cfg.max_time is None else 60 * cfg.max_time,
                            enabled=run.main and run.show_progress)
    run.log = MetricsLog(run.out_dir, run.main, state.step, tensorboard=cfg.tensorboard,
                         progress=run.progress)
    if latest is not None:
        run.log.say(f"resumed from {latest} at step {state.step}")
    return state


def rank_state(run: Run, where: Path, ranks: list[dict], step: int) -> tuple[dict, dict]:
    """This rank's generators and data position from a checkpoint of `len(ranks)` ranks.

    On as many ranks, each takes its own. On another number, the data position must be one
    for all, and mean the same for any number of ranks: batches that build the global batch
    and keep their rows, as pretraining's do (whose state checks the global batch), continue
    with exactly the rows and masks of an uninterrupted run. A rank the checkpoint had takes
    its generators, a new one seeds torch's from (seed, rank, step) (dropout's draws: with
    dropout no two world sizes draw alike anyway)."""
    if len(ranks) == run.world:
        return ranks[run.rank]["rng"], ranks[run.rank]["feed"]
    if any(not _same(r["feed"], ranks[0]["feed"]) for r in ranks[1:]):
        raise UserError(f"{where}: checkpoint was made by {len(ranks)} ranks, each at its own "
                        f"place in the data: resume it with {len(ranks)} ranks (this run has "
                        f"{run.world})")
    if run.main:
        print(f"note: {where} was made by {len(ranks)} rank(s); {run.world} continue it with "
              f"the same global batch", file=sys.stderr)
    if run.rank < len(ranks):
        return ranks[run.rank]["rng"], ranks[0]["feed"]
    rng = dict(ranks[0]["rng"])
    seed = ((run.cfg.seed * 1_000_003 + run.rank) * 1_000_003 + step) % 2 ** 63
    rng["torch"] = torch.Generator().manual_seed(seed).get_state()
    rng.pop("cuda", None)
    torch.cuda.manual_seed_all(seed)  # dropout on a GPU draws from these, not from torch's
    return rng, ranks[0]["feed"]


def _same(a, b) -> bool:
    """Whether two saved states (dicts, lists, numbers, tensors, arrays) are equal."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) \
            and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if hasattr(a, "shape"):  # NumPy
        return hasattr(b, "shape") and a.shape == b.shape and bool((a == b).all())
    return a == b
