"""Evaluation during a run: when it is due, the figures of rank 0 sent to every rank and
recorded, the weights of the best `cfg.best_metric` kept apart from the rotating checkpoints,
and early stopping after `cfg.patience` evaluations without a better one.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save
from torch import nn

from bertkit import signals
from bertkit.files import UserError, atomic_file
from bertkit.runtime import autocast
from bertkit.training.run_state import Run, State, final_step
from bertkit.training.runlog import format_metrics


def evaluation_due(run: Run, state: State) -> bool:
    every = run.cfg.eval_every and state.step % run.cfg.eval_every == 0
    return run.evaluate is not None and bool(
        every or final_step(run, state) or state.stopped_by == "max_time")


def run_evaluation(run: Run, state: State) -> None:
    """`evaluate` on rank 0 in eval mode, its figures sent to every rank and recorded."""
    result = [None]
    if run.main:
        run.model.eval()
        with torch.no_grad(), autocast(run.device, run.cfg.precision):
            result[0] = {k: float(v) for k, v in run.evaluate(run.model).items()}
        run.model.train()
    if run.distributed:
        signals.wait(dist.barrier(async_op=True))  # the others wait for rank 0 in Python
        dist.broadcast_object_list(result, src=0)
    state.eval_metrics, state.last_eval_step = result[0], state.step
    run.log.record({"step": state.step, "split": "eval",
                    "seconds": round(state.train_seconds, 3), **state.eval_metrics})
    run.log.say(f"eval step {state.step}  {format_metrics(state.eval_metrics)}")


def evaluate_and_keep_best(run: Run, state: State) -> None:
    """Evaluate; keep the weights of the best `cfg.best_metric` so far; stop early after
    `cfg.patience` evaluations without a better one."""
    cfg = run.cfg
    run_evaluation(run, state)
    if cfg.best_metric is None:
        return
    if cfg.best_metric not in state.eval_metrics:
        raise UserError(f"best metric {cfg.best_metric!r} is not among the evaluation's "
                        f"figures ({', '.join(state.eval_metrics)})")
    value = state.eval_metrics[cfg.best_metric]
    if state.best_value is None or (value > state.best_value if cfg.best_mode == "max"
                                    else value < state.best_value):
        state.best_value, state.best_step, state.evals_since_best = value, state.step, 0
        if run.main:
            _save_best(run.checkpoints, run.model, value, state.step)
        return
    state.evals_since_best += 1
    if cfg.patience is not None and state.evals_since_best >= cfg.patience:
        run.log.say(f"early stop: {cfg.best_metric} has not improved for "
                    f"{state.evals_since_best} evaluations (best {state.best_value:.4g} at "
                    f"step {state.best_step})")
        state.stopped_by = "early_stop"


def _save_best(root: Path, model: nn.Module, value: float, step: int) -> None:
    """The best weights so far, kept apart from the rotating checkpoints."""
    root.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    with atomic_file(root / "best.safetensors", "wb") as f:
        f.write(save(state, metadata={"value": repr(value), "step": str(step)}))
