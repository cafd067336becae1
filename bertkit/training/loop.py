"""The one training loop, shared by pretraining and fine-tuning.

    result = train(model, loss_fn, batches, cfg, out_dir, evaluate=..., save=...)

* `model` — any nn.Module (already initialised or loaded); moved to `device`.
* `loss_fn(model, batch) -> (loss, metrics)` — `loss` a scalar tensor (the mean over the
  batch's own targets), `metrics` a dict of scalar tensors (accuracies, part losses). Called
  in train mode under autocast; it must not call `.item()` (metrics are synced only at log
  time).
* `batches` — an iterable of dicts of CPU tensors, iterated again when it runs out (epochs).
  Give it `state_dict()` / `load_state_dict()` for an exact resume; otherwise a resume skips
  the batches already seen. Under DDP each rank passes its own share.
* `evaluate(model) -> dict[str, float]` — called every `cfg.eval_every` steps and at the end,
  with the plain model in eval mode under `torch.no_grad()` and autocast; runs on rank 0 only
  and its result is sent to every rank. `cfg.best_metric` names one of its keys.
* `save(model, path)` — writes the final model directory; default `hub.save_model`.
* `target_count(batch) -> tensor` — optional number of targets a batch's loss averages over
  (masked tokens, for MLM). Micro-batches (accumulation steps and DDP ranks) are then weighted
  by it, so one step's gradient equals that of the mean over all targets of the global batch:
  2 ranks x B and 1 rank x 2B give the same parameters.
* `find_unused_parameters` — under DDP, look for weights the loss leaves without a gradient
  (a pooler a tagger never reads) instead of failing on them; pass False when every
  trainable weight is used (freeze the others), to save the search and torch's warning.
* `fingerprint` — a JSON-able dict describing the data and objective; a checkpoint made with
  another fingerprint (or another model shape) is refused on resume.

Writes into `out_dir`: `metrics.jsonl` (one JSON object per log or eval: step, split, loss,
metrics, lr, tokens/s), `loss.png`, `checkpoints/step-*/` (see checkpoint.py),
`checkpoints/best.safetensors` when tracking a best metric, and the final model files at the
top. Progress lines go to stderr. Ctrl-C or SIGTERM finishes the current step, saves a
checkpoint and returns with `stopped_by="interrupted"` (no final model). Only rank 0 writes.

Not here: device, dtype and seed are arguments; the process group, if any, is set up by the
caller (`torchrun` + `torch.distributed.init_process_group`) and detected.
"""
from __future__ import annotations

import contextlib
import math
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save
from torch import nn

from bertkit.training.checkpoint import (latest_checkpoint, load_checkpoint, model_fingerprint, rng_state,
                         save_checkpoint, set_rng_state)
from bertkit.config import TrainConfig
from bertkit.training.runlog import MetricsLog, format_metrics, plot_loss, progress_line
from bertkit.files import UserError, atomic_file

LossFn = Callable[[nn.Module, dict], "tuple[torch.Tensor, dict[str, torch.Tensor]]"]


@dataclass
class TrainResult:
    step: int
    """Optimizer steps done (counting those before a resume)."""
    tokens: int
    """Tokens trained on, all ranks."""
    train_seconds: float
    """Time spent in training steps (evaluation and checkpointing not counted)."""
    stopped_by: str
    """"max_steps", "max_time", "early_stop" or "interrupted"."""
    train_metrics: dict[str, float] = field(default_factory=dict)
    """The last logged training figures (loss, metrics, lr, tokens_per_s)."""
    eval_metrics: dict[str, float] = field(default_factory=dict)
    """The last evaluation's result."""
    best_value: float | None = None
    """Best value of cfg.best_metric seen, if tracked."""
    best_step: int | None = None
    """Step at which best_value was reached."""
    out_dir: Path | None = None


def default_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on matrices and embeddings, none on biases and LayerNorm weights."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_factor(cfg: TrainConfig, step: int, train_seconds: float) -> float:
    """Multiplier of the peak learning rate for optimizer step `step` (counted from 1).

    Progress through the run is step / max_steps or, for a time budget without max_steps,
    the fraction of max_time spent (the schedule of a time-limited run follows the clock).
    """
    if cfg.max_steps is not None:
        progress, per_step = (step - 1) / cfg.max_steps, 1 / cfg.max_steps
    else:
        progress, per_step = train_seconds / (60 * cfg.max_time), 0.0
    if cfg.warmup_steps is not None:
        warm_end = cfg.warmup_steps * per_step
        warm = 1.0 if cfg.warmup_steps == 0 else min(1.0, step / cfg.warmup_steps)
    else:
        warm_end = cfg.warmup_fraction
        warm = 1.0 if warm_end == 0 else min(1.0, (progress + per_step) / warm_end)
    if cfg.schedule == "constant" or progress <= warm_end:
        return warm
    t = min(1.0, (progress - warm_end) / max(1e-12, 1.0 - warm_end))
    shape = 1.0 - t if cfg.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * t))
    return warm * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape)


def make_optimizer(groups: list[dict], cfg: TrainConfig, device: torch.device):
    """AdamW, fused into one kernel per step where the device supports it, else foreach."""
    kwargs = dict(lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    if device.type in ("cpu", "cuda"):
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (RuntimeError, ValueError):
            pass
    return torch.optim.AdamW(groups, foreach=True, **kwargs)


def autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def is_out_of_memory(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(e, RuntimeError) and any(s in text for s in (
            "out of memory", "not enough memory", "can't allocate memory",
            "defaultcpuallocator")))


class _Objective(nn.Module):
    """model + loss_fn as one module, so that DDP sees the whole loss inside its forward."""

    def __init__(self, model: nn.Module, loss_fn: LossFn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, batch: dict):
        return self.loss_fn(self.model, batch)


class _Feed:
    """Endless batches from an iterable: a new pass when one ends, and a resumable position."""

    def __init__(self, batches: Iterable[dict]):
        self.batches, self.epoch, self.index, self.it = batches, 0, 0, None

    def next(self) -> dict:
        if self.it is None:
            self.it = iter(self.batches)
        try:
            batch = next(self.it)
        except StopIteration:
            if self.index == 0:
                raise UserError("the training data yields no batches") from None
            self.epoch, self.index, self.it = self.epoch + 1, 0, iter(self.batches)
            batch = next(self.it)
        self.index += 1
        return batch

    def close(self) -> None:
        """Stop the iterator (and any prefetching thread behind it)."""
        if hasattr(self.it, "close"):
            self.it.close()
        self.it = None

    def state_dict(self) -> dict:
        state = {"epoch": self.epoch, "index": self.index}
        if hasattr(self.batches, "state_dict"):
            state["batches"] = self.batches.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index, self.it = state["epoch"], state["index"], None
        if "batches" in state and hasattr(self.batches, "load_state_dict"):
            self.batches.load_state_dict(state["batches"])
            return
        self.it = iter(self.batches)
        for _ in range(self.index):
            next(self.it)


class _StopSignal:
    """Ctrl-C / SIGTERM set a flag the loop checks after each step; a second Ctrl-C aborts."""

    def __init__(self, announce: bool):
        self.signum: int | None = None
        self.announce = announce
        self.previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        if self.announce:
            print(f"\n{signal.Signals(signum).name}: finishing this step and saving a checkpoint "
                  f"(Ctrl-C again to abort)", file=sys.stderr, flush=True)


def _to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


def _num_tokens(batch: dict) -> int:
    """Real tokens in a CPU batch, counted without touching the device."""
    if "num_tokens" in batch:
        return int(batch["num_tokens"])
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int(batch["input_ids"].numel())


def train(model: nn.Module, loss_fn: LossFn, batches: Iterable[dict], cfg: TrainConfig,
          out_dir: str | Path, *, evaluate: Callable[[nn.Module], dict] | None = None,
          param_groups: list[dict] | None = None,
          save: Callable[[nn.Module, Path], object] | None = None,
          target_count: Callable[[dict], torch.Tensor] | None = None,
          fingerprint: dict | None = None, device: str | torch.device = "cpu",
          find_unused_parameters: bool = True, show_progress: bool = True) -> TrainResult:
    """Train `model` on `batches` with `loss_fn` per `cfg`; see the module docstring."""
    device = torch.device(device)
    out_dir = Path(out_dir)
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    main = rank == 0
    if cfg.precision == "fp16" and device.type != "cuda":
        raise UserError("fp16 needs a GPU; use bf16 on the CPU")
    created = not out_dir.exists()
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_root = out_dir / "checkpoints"

    model.to(device).train()
    optimizer = make_optimizer(param_groups or default_param_groups(model, cfg.weight_decay),
                               cfg, device)
    for group in optimizer.param_groups:
        group["peak_lr"] = group["lr"]
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
    fp = {"model": model_fingerprint(model), "world_size": world, **(fingerprint or {})}
    feed = _Feed(batches)

    step, tokens, train_seconds = 0, 0, 0.0
    best_value, best_step, evals_since_best = None, None, 0
    latest = latest_checkpoint(ckpt_root) if cfg.resume else None
    if not cfg.resume and latest_checkpoint(ckpt_root) is not None:
        raise UserError(f"{out_dir}: holds checkpoints of an earlier run: resume it (--resume) "
                        f"or choose another output directory")
    if latest is not None:
        state = load_checkpoint(latest, model=model, optimizer=optimizer, fingerprint=fp)
        step, tokens, train_seconds = state["step"], state["tokens"], state["train_seconds"]
        best_value, best_step = state["best_value"], state["best_step"]
        evals_since_best = state["evals_since_best"]
        scaler.load_state_dict(state["scaler"])
        set_rng_state(state["ranks"][rank]["rng"])
        feed.load_state_dict(state["ranks"][rank]["feed"])
    else:
        if cfg.resume and main:
            print(f"no checkpoint in {ckpt_root}: starting afresh", file=sys.stderr)
        torch.manual_seed(cfg.seed + rank)
    log = MetricsLog(out_dir, main, step)
    if latest is not None:
        log.say(f"resumed from {latest} at step {step}")

    objective = _Objective(model, loss_fn)
    if cfg.compile:  # the loss too: it holds the vocabulary projection
        objective = torch.compile(objective)
    if distributed:
        objective = nn.parallel.DistributedDataParallel(
            objective, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=find_unused_parameters)
    params = [p for g in optimizer.param_groups for p in g["params"]]

    def should_stop_for_time() -> bool:
        return cfg.max_time is not None and train_seconds >= 60 * cfg.max_time

    def checkpoint() -> None:
        ranks = [{"rng": rng_state(), "feed": feed.state_dict()}]
        if distributed:
            gathered = [None] * world
            dist.all_gather_object(gathered, ranks[0])
            ranks = gathered
        if main:
            save_checkpoint(ckpt_root, step, model=model, optimizer=optimizer, keep=cfg.keep_checkpoints,
                            state={"step": step, "tokens": tokens, "train_seconds": train_seconds,
                                   "best_value": best_value, "best_step": best_step,
                                   "evals_since_best": evals_since_best,
                                   "scaler": scaler.state_dict(), "ranks": ranks,
                                   "fingerprint": fp})

    def run_evaluation() -> dict:
        result = [None]
        if main:
            model.eval()
            with torch.no_grad(), autocast(device, cfg.precision):
                result[0] = {k: float(v) for k, v in evaluate(model).items()}
            model.train()
        if distributed:
            dist.broadcast_object_list(result, src=0)
        return result[0]

    eval_metrics: dict[str, float] = {}
    train_metrics: dict[str, float] = {}
    sums: dict[str, torch.Tensor] = {}
    logged_steps, window_tokens, window_seconds = 0, 0, 0.0
    stopped_by = None
    last_eval_step = -1
    try:
        with _StopSignal(announce=main and show_progress) as stop:
            while stopped_by is None:
                if cfg.max_steps is not None and step >= cfg.max_steps:
                    stopped_by = "max_steps"
                    break
                started = time.perf_counter()
                micro = [feed.next() for _ in range(cfg.grad_accum)]
                n_tokens = sum(_num_tokens(b) for b in micro)
                micro = [_to_device(b, device) for b in micro]
                if target_count is not None:
                    counts = torch.stack([torch.as_tensor(target_count(b), device=device)
                                          .float() for b in micro])
                    total = counts.sum()
                    if distributed:
                        dist.all_reduce(total)
                    # DDP averages gradients over ranks, hence the factor `world`.
                    weights = counts * (world / total.clamp(min=1))
                else:
                    weights = [1.0 / cfg.grad_accum] * cfg.grad_accum
                try:
                    for i, batch in enumerate(micro):
                        last = i == len(micro) - 1
                        no_sync = objective.no_sync() if distributed and not last \
                            else contextlib.nullcontext()
                        with no_sync:
                            with autocast(device, cfg.precision):
                                loss, metrics = objective(batch)
                            scaler.scale(loss.float() * weights[i]).backward()
                        for k, v in {"loss": loss, **metrics}.items():
                            v = v.detach().float()
                            sums[k] = sums[k] + v if k in sums else v
                    scaler.unscale_(optimizer)
                    if cfg.clip_norm > 0:
                        grad_norm = nn.utils.clip_grad_norm_(params, cfg.clip_norm, foreach=True)
                        sums["grad_norm"] = sums.get("grad_norm", 0) + grad_norm.detach() * cfg.grad_accum
                    factor = lr_factor(cfg, step + 1, train_seconds)
                    for group in optimizer.param_groups:
                        group["lr"] = group["peak_lr"] * factor
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
                except Exception as e:
                    if is_out_of_memory(e):
                        B, T = micro[0]["input_ids"].shape
                        raise UserError(f"out of memory for a batch of {B} x {T} tokens: lower "
                                        f"the batch size or the sequence length (raise gradient "
                                        f"accumulation to keep the effective batch)") from None
                    raise
                step += 1
                tokens += n_tokens * world
                logged_steps += cfg.grad_accum
                window_tokens += n_tokens * world
                elapsed = time.perf_counter() - started
                train_seconds += elapsed
                window_seconds += elapsed

                final = cfg.max_steps is not None and step >= cfg.max_steps
                if step % cfg.log_every == 0 or final:
                    names = sorted(sums)
                    values = torch.stack([sums[k] for k in names])
                    if distributed:
                        dist.all_reduce(values)
                        values = values / world
                    values = values.tolist()  # the host sync, once per log_every steps
                    # Time spent waiting on the device is only visible after the sync.
                    window_seconds += time.perf_counter() - started - elapsed
                    train_seconds += time.perf_counter() - started - elapsed
                    train_metrics = {k: v / logged_steps for k, v in zip(names, values)}
                    train_metrics["lr"] = optimizer.param_groups[0]["lr"]
                    train_metrics["tokens_per_s"] = window_tokens / max(window_seconds, 1e-9)
                    log.record({"step": step, "split": "train", "tokens": tokens,
                                "seconds": round(train_seconds, 3), **train_metrics})
                    if show_progress:
                        log.say(progress_line(step, cfg, train_seconds, tokens, train_metrics))
                    sums, logged_steps, window_tokens, window_seconds = {}, 0, 0, 0.0
                    wanted = should_stop_for_time() or stop.signum is not None
                    if distributed:
                        flag = torch.tensor([float(wanted)])
                        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                        wanted = bool(flag.item())
                    if wanted:
                        stopped_by = "interrupted" if stop.signum is not None else "max_time"
                elif not distributed and (should_stop_for_time() or stop.signum is not None):
                    stopped_by = "interrupted" if stop.signum is not None else "max_time"

                done = final or stopped_by in ("max_time",)
                if evaluate is not None and (
                        (cfg.eval_every and step % cfg.eval_every == 0) or done):
                    eval_metrics = run_evaluation()
                    last_eval_step = step
                    log.record({"step": step, "split": "eval", "seconds": round(train_seconds, 3),
                    **eval_metrics})
                    log.say(f"eval step {step}  {format_metrics(eval_metrics)}")
                    if cfg.best_metric is not None:
                        if cfg.best_metric not in eval_metrics:
                            raise UserError(f"best metric {cfg.best_metric!r} is not among the "
                                            f"evaluation's figures ({', '.join(eval_metrics)})")
                        value = eval_metrics[cfg.best_metric]
                        better = best_value is None or (value > best_value if cfg.best_mode == "max"
                                                        else value < best_value)
                        if better:
                            best_value, best_step, evals_since_best = value, step, 0
                            if main:
                                _save_best(ckpt_root, model, value, step)
                        else:
                            evals_since_best += 1
                            if cfg.patience is not None and evals_since_best >= cfg.patience:
                                log.say(f"early stop: {cfg.best_metric} has not improved for "
                                        f"{evals_since_best} evaluations (best {best_value:.4g} "
                                        f"at step {best_step})")
                                stopped_by = "early_stop"
                if (cfg.save_every and step % cfg.save_every == 0) or stopped_by == "interrupted":
                    checkpoint()
                    if stopped_by == "interrupted":
                        log.say(f"saved a checkpoint at step {step}; continue with --resume")
    except BaseException:
        feed.close()
        log.close()
        if main and created and step == 0 and out_dir.exists():
            shutil.rmtree(out_dir, ignore_errors=True)  # nothing worth keeping was written
        raise

    feed.close()
    if evaluate is not None and last_eval_step != step and stopped_by != "interrupted":
        eval_metrics = run_evaluation()
        log.record({"step": step, "split": "eval", "seconds": round(train_seconds, 3),
                    **eval_metrics})
        log.say(f"eval step {step}  {format_metrics(eval_metrics)}")
    log.close()
    if main:
        plot_loss(out_dir / "metrics.jsonl", out_dir / "loss.png")
        if stopped_by != "interrupted":
            if cfg.best_metric is not None and cfg.restore_best and best_step is not None \
                    and best_step != step:
                model.load_state_dict(load_file(str(ckpt_root / "best.safetensors")), strict=False)
                log.say(f"final model = best evaluation ({cfg.best_metric} {best_value:.4g} at "
                        f"step {best_step})")
            if save is None:
                from bertkit.model.hub import save_model
                save_model(model, out_dir)
            else:
                save(model, out_dir)
    if distributed:
        # Ranks leave together once rank 0 has written, and drop DDP (its communication
        # hooks) before anyone tears the process group down.
        del objective
        dist.barrier()
    return TrainResult(step=step, tokens=tokens, train_seconds=train_seconds,
                       stopped_by=stopped_by, train_metrics=train_metrics,
                       eval_metrics=eval_metrics, best_value=best_value, best_step=best_step,
                       out_dir=out_dir)


def _save_best(root: Path, model: nn.Module, value: float, step: int) -> None:
    """The best weights so far, kept apart from the rotating checkpoints."""
    root.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    with atomic_file(root / "best.safetensors", "wb") as f:
        f.write(save(state, metadata={"value": repr(value), "step": str(step)}))


__all__ = ["train", "TrainResult", "TrainConfig", "default_param_groups", "lr_factor",
           "make_optimizer", "autocast", "is_out_of_memory"]
