"""The one training loop, shared by pretraining and fine-tuning.

    result = train(model, loss_fn, batches, cfg, out_dir, evaluate=..., save=...)

* `model` — any nn.Module (already initialised or loaded); moved to `device`.
* `loss_fn(model, batch) -> (loss, metrics)` — `loss` a scalar tensor (the mean over the
  batch's own targets), `metrics` a dict of scalar tensors (accuracies, part losses). Called
  in train mode under autocast; it must not call `.item()` (metrics are synced only at log
  time).
* `batches` — an iterable of dicts of CPU tensors, iterated again when it runs out (epochs).
  Give it `state_dict()` / `load_state_dict()` for an exact resume; otherwise a resume skips
  the batches already seen. Under DDP each rank passes its own share; where every rank's
  position is the same (each builds the global batch and keeps its rows, as pretraining's
  batches do), a checkpoint resumes on any number of ranks (`resume.rank_state`). Batches that
  change during the run (pretraining's short-then-long sequences, a scheduled masking rate)
  take `set_progress(fraction)`, called before each step with how far the run is (0 to 1, by
  steps or by the clock). Batches whose shape changes (pretraining's context phases) give
  `first_batches()`, one batch of each shape without moving their position: compiled, their
  sizes are marked dynamic and each shape is run (forward and backward, its gradients then
  dropped and the random state put back) before the clock starts, so that no shape compiles
  inside the timed run.
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
* `flops(batch) -> float` — optional training FLOPs of the model on a batch (CPU tensors):
  each log window then writes `mfu` beside tokens_per_second, and the run's end says its MFU
  (`bertkit.training.mfu`: against the device's published peak, else its measured matmul
  rate).
* `fingerprint` — a JSON-able dict describing the data and objective; a checkpoint made with
  another fingerprint (or another model shape) is refused on resume. Its entry "given"
  (`checkpoint.GIVEN`), if any, is saved with it and not compared: what the caller records
  to explain its own refusals (pretraining's --data as typed).
* `settings` — the run's record (`bertkit.training.settings.run_settings`), written as
  `training_args.json` once the checkpoint to resume, if any, is loaded: a resume refused
  (`resume.check_resume`: another model, other data or settings) leaves `out_dir` as it was, the
  record of the run its checkpoints belong to included.

Writes into `out_dir`: `training_args.json` (given `settings`), `metrics.jsonl` (one JSON
object per log or eval: step, split, loss, metrics, learning_rate, tokens_per_second, mfu),
`loss.png`, `checkpoints/step-*/` (see checkpoint.py; one is always saved at the end, so that
`resume` with a larger `max_steps` extends a finished run), `checkpoints/best.safetensors` when
tracking a best metric, `tensorboard/` with `cfg.tensorboard`, and the final model files at the
top. Progress goes to stderr (`bertkit.progress`: a live bar on a terminal, a line every few
seconds elsewhere), evaluations as lines above it. Ctrl-C or SIGTERM finishes the current step, saves a
checkpoint (with every rank: a rank whose peer is gone cannot, and is not told it will) and
returns with `stopped_by="interrupted"` (no final model). Only rank 0 writes.

Dropout draws from torch's process-wide generator: a run seeds it with `cfg.seed + rank` (a
resume restores it from the checkpoint) and gives the caller's generators back on return.

Not here: device, dtype and seed are arguments; the process group, if any, is set up by the
caller (`torchrun` + `torch.distributed.init_process_group`) and detected.

`train` reads as the loop it runs: `_optimisation_step` (micro-batches, autocast, clipping,
schedule, the periodic log), `_check_stop` (time, signals), `evaluate_and_keep_best`,
`_checkpoint`, then `_finish`; the fixed setup is a `Run`, what changes a `State`
(`bertkit.training.run_state`). Resuming: `bertkit.training.resume`; evaluating and keeping
the best weights: `bertkit.training.best`; signals: `bertkit.training.interrupt`.
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch import nn

from bertkit import signals
from bertkit.config import TrainConfig
from bertkit.figures import draw_or_skip
from bertkit.files import UserError
from bertkit.model.hub import save_model
from bertkit.runlock import LOCK_FILE, RunLock
from bertkit.runtime import (MAX_TIME, SharedCores, autocast, bf16_warning, choose_precision,
                             compiles_for, max_time_cap, resolve_device)
from bertkit.training.best import evaluate_and_keep_best, evaluation_due, run_evaluation
from bertkit.training.checkpoint import rng_state, save_checkpoint, set_rng_state
from bertkit.training.interrupt import StopSignal
from bertkit.training.mfu import BatchFlops, flop_meter
from bertkit.training.optimizer import (default_param_groups, lr_factor, make_optimizer,
                                        micro_batches, run_progress)
from bertkit.training.resume import (check_fresh_start, check_resume, resume_or_seed,
                                     run_fingerprint)
from bertkit.training.run_state import (Feed, Run, State, dynamic_shapes, final_step,
                                        num_tokens, to_device)
from bertkit.training.runlog import plot_loss, progress_note, summary_writer
from bertkit.training.settings import write_settings

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
    """The last logged training figures (loss, metrics, learning_rate, tokens_per_second): the
    last log window's."""
    eval_metrics: dict[str, float] = field(default_factory=dict)
    """The last evaluation's result."""
    best_value: float | None = None
    """Best value of cfg.best_metric seen, if tracked."""
    best_step: int | None = None
    """Step at which best_value was reached."""
    out_dir: Path | None = None
    mfu: float | None = None
    """The model FLOP utilisation of this process's steps (given `flops`)."""
    utilisation: str | None = None
    """The same in words, against each rate known (`peaks.utilisation`)."""

    def summary(self) -> dict:
        """The result as one JSON-able object, in the names of the README's table: the
        training figures prefixed `train_`, the evaluation's as they come (`eval_*`, `dev_*`).
        Its tokens/s is the whole run's, not the last window's: a window can hold a compile
        (on a GPU, when the rows grow from 64 to 128 tokens) and read a hundredth of the rest."""
        train = {f"train_{k}": v for k, v in self.train_metrics.items()}
        if self.train_seconds > 0 and "tokens_per_second" in self.train_metrics:
            train["train_tokens_per_second"] = self.tokens / self.train_seconds
        if self.mfu is not None:
            train.update(train_mfu=round(self.mfu, 4), train_utilisation=self.utilisation)
        return {"out_dir": None if self.out_dir is None else str(self.out_dir),
                "steps": self.step, "tokens": self.tokens,
                "train_seconds": round(self.train_seconds, 3), "stopped_by": self.stopped_by,
                **({"best_step": self.best_step} if self.best_step is not None else {}),
                **train, **self.eval_metrics}


class _Objective(nn.Module):
    """model + loss_fn as one module, so that DDP sees the whole loss inside its forward."""

    def __init__(self, model: nn.Module, loss_fn: LossFn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, batch: dict):
        return self.loss_fn(self.model, batch)


# The loop -----------------------------------------------------------------------------------

def train(model: nn.Module, loss_fn: LossFn, batches: Iterable[dict], cfg: TrainConfig,
          out_dir: str | Path, *, evaluate: Callable[[nn.Module], dict] | None = None,
          param_groups: list[dict] | None = None,
          save: Callable[[nn.Module, Path], object] | None = None,
          target_count: Callable[[dict], torch.Tensor] | None = None,
          fingerprint: dict | None = None, device: str | torch.device = "cpu",
          find_unused_parameters: bool = True, show_progress: bool = True,
          settings: dict | None = None, checked: bool = False,
          flops: BatchFlops | None = None) -> TrainResult:
    """Train `model` on `batches` with `loss_fn` per `cfg`; see the module docstring.
    `checked`: the caller holds out_dir's lock and has checked the checkpoint it resumes
    against this model and `fingerprint` (`check_resume`), which train does not do again."""
    out_dir = Path(out_dir)
    first_rank = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    with _own_rng(), RunLock(out_dir, enabled=first_rank and not checked):  # one writer
        # nothing there but the lock (this run's, or its caller's): all that is written is
        # this run's, and removed if it fails before its first step
        fresh = first_rank and all(p.name == LOCK_FILE for p in out_dir.iterdir())
        # a checkpoint of another run is refused before anything is printed or written
        latest = check_fresh_start(out_dir, cfg.resume) if checked \
            else check_resume(out_dir, cfg.resume, model, fingerprint)
        run = _start(model, loss_fn, batches, cfg, out_dir, evaluate, param_groups,
                     target_count, fingerprint, resolve_device(device), find_unused_parameters,
                     show_progress, settings, flops)
        state = resume_or_seed(run, latest)  # the last refusals: OUT is still as it was
        try:
            if run.main and run.settings is not None:
                write_settings(out_dir, run.settings)
            if cfg.compile and run.feed.shapes_vary:
                _compile_each_shape(run)
            with StopSignal(announce=run.main and show_progress, last_checkpoint=(
                    (lambda: state.last_checkpoint_step) if run.distributed else None)) as stop:
                while not _reached_max_steps(run, state):
                    _optimisation_step(run, state)
                    _check_stop(run, state, stop)
                    if evaluation_due(run, state):
                        evaluate_and_keep_best(run, state)
                    if (cfg.save_every and state.step % cfg.save_every == 0) \
                            or state.stopped_by == "interrupted":
                        _checkpoint(run, state)
                    if state.stopped_by is not None:
                        break
            if state.stopped_by != "interrupted" and state.last_checkpoint_step != state.step:
                _checkpoint(run, state)  # a finished run can be extended (--resume)
        except BaseException:
            run.feed.close()
            run.progress.close()
            run.log.close()
            if run.main and fresh and state.step == 0:
                _remove_written(out_dir)  # nothing worth keeping; the lock removes the folder
            raise
        _finish(run, state, save)
    return TrainResult(step=state.step, tokens=state.tokens, train_seconds=state.train_seconds,
                       stopped_by=state.stopped_by, train_metrics=state.train_metrics,
                       eval_metrics=state.eval_metrics, best_value=state.best_value,
                       best_step=state.best_step, out_dir=out_dir,
                       mfu=None if run.flops is None else run.flops.run_mfu,
                       utilisation=None if run.flops is None else run.flops.run_words())


def _remove_written(out_dir: Path) -> None:
    """Everything in `out_dir` but its lock (whose release removes the directory it made)."""
    for path in out_dir.iterdir():
        if path.name == LOCK_FILE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def _own_rng():
    """Dropout draws from torch's process-wide generator (nn.Dropout takes no Generator), so a
    run seeds it (`cfg.seed + rank`) and a resume restores it, for bit-exact resumes. The
    caller's generators are given back as they were when `train` returns."""
    saved = rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)


def check_config(cfg: TrainConfig, device: torch.device) -> None:
    """The settings `train` refuses on this device and process group, as a one-line
    UserError: callers run it before they print or measure anything."""
    if cfg.precision == "fp16" and device.type != "cuda":
        raise UserError("fp16 needs a GPU; use bf16 on the CPU")
    if cfg.compile and not compiles_for(device):
        needs = ("Triton (pip install triton)" if device.type == "cuda" else
                 "a C++ compiler (g++ or clang++ on the PATH, or $CXX)")
        where = "a GPU" if device.type == "cuda" else "the CPU"
        raise UserError(f"--compile on {where} needs {needs}, or train with --no-compile")
    if dist.is_available() and dist.is_initialized() and cfg.grad_accum_final is not None \
            and cfg.max_steps is None:
        # each rank's clock differs: the ranks would disagree on the micro-batches per step
        raise UserError("batch growth (grad_accum_final) over several processes needs "
                        "max_steps: a time budget alone grows by each process's own clock")
    if cfg.tensorboard:
        summary_writer()  # fails now, not after the first steps, when tensorboard is absent


def _start(model, loss_fn, batches, cfg, out_dir, evaluate, param_groups, target_count,
           fingerprint, device, find_unused_parameters, show_progress, settings,
           flops=None) -> Run:
    """Check the options, make the optimiser and the wrapped objective."""
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    check_config(cfg, device)
    cfg, settings = _capped(cfg, settings, announce=rank == 0)
    if cfg.precision == "auto":
        precision, why = choose_precision(device)
        cfg = cfg.replace(precision=precision)
        if rank == 0 and show_progress:
            print(f"precision {precision}: {why}", file=sys.stderr)
        if settings is not None:
            settings = {**settings, "environment": {**settings.get("environment", {}),
                                                    "precision": precision}}
    elif rank == 0 and (warning := bf16_warning(cfg.precision, device)):
        print(warning, file=sys.stderr)
    model.to(device).train()
    optimizer = make_optimizer(param_groups or default_param_groups(model, cfg.weight_decay),
                               cfg, device)
    for group in optimizer.param_groups:
        group["peak_lr"] = group["lr"]
    objective = _Objective(model, loss_fn)
    if cfg.compile:  # the loss too: it holds the vocabulary projection
        objective = torch.compile(objective)
    if distributed:
        objective = nn.parallel.DistributedDataParallel(
            objective, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=find_unused_parameters)
    return Run(cfg=cfg, device=device, out_dir=out_dir, model=model, objective=objective,
                optimizer=optimizer,
                scaler=torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16"),
                feed=Feed(batches), evaluate=evaluate, target_count=target_count,
                fingerprint=run_fingerprint(model, fingerprint),
                show_progress=show_progress, distributed=distributed, rank=rank, world=world,
                cores=SharedCores(torch.get_num_threads())
                if device.type == "cpu" and not distributed else None, settings=settings,
                flops=flop_meter(flops, device, cfg.precision, world))


def _capped(cfg: TrainConfig, settings: dict | None, announce: bool):
    """`cfg` and `settings` with max_time at most $BERTKIT_MAX_TIME (`runtime.max_time_cap`),
    said once on stderr where the cap shortens the run. Here, in the one loop, so that every
    training command obeys it; the caller's own settings (and a checkpoint's fingerprint) keep
    the budget it asked for, and the record says what capped it."""
    cap = max_time_cap()
    if cap is None or (cfg.max_time is not None and cfg.max_time <= cap[0]):
        return cfg, settings
    if announce:
        print(f"{MAX_TIME}={cap[1]} caps this run's time", file=sys.stderr)
    if settings is not None:
        settings = {**settings, "environment": {**settings.get("environment", {}),
                                                MAX_TIME: cap[1]}}
    return cfg.replace(max_time=cap[0]), settings


def _reached_max_steps(run: Run, state: State) -> bool:
    if run.cfg.max_steps is not None and state.step >= run.cfg.max_steps:
        state.stopped_by = "max_steps"
        return True
    return False


def _micro_weights(run: Run, micro: list[dict]):
    """Each micro-batch's share of the step's gradient: by its targets when counted (all
    ranks together), else equal."""
    if run.target_count is None:
        return [1.0 / len(micro)] * len(micro)
    counts = torch.stack([torch.as_tensor(run.target_count(b), device=run.device).float()
                          for b in micro])
    total = counts.sum()
    if run.distributed:
        dist.all_reduce(total)
    return counts * (run.world / total.clamp(min=1))  # DDP averages over ranks: hence `world`


def _out_of_memory(e: BaseException) -> bool:
    """Whether an error is an allocation failure. Accelerators raise torch.OutOfMemoryError;
    torch's CPU allocator raises a plain RuntimeError (torch 2.13: no subclass to catch), so
    there its enforce message is the only sign."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    return "DefaultCPUAllocator: can't allocate memory" in str(e)


@contextlib.contextmanager
def _memory_of(batch: dict):
    """An allocation failure of a step on batches like `batch` as one line: what to lower."""
    try:
        yield
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:
        if not _out_of_memory(e):
            raise
        B, T = batch["input_ids"].shape
        raise UserError(f"out of memory for a batch of {B} x {T} tokens: lower the batch size "
                        f"or the sequence length (raise gradient accumulation to keep the "
                        f"effective batch)") from None


def _optimisation_step(run: Run, state: State) -> None:
    """One optimiser step: cfg.grad_accum micro-batches forward and backward under autocast,
    then clipping, the scheduled learning rate and the update; then the progress log."""
    cfg = run.cfg
    started = time.perf_counter()
    count = micro_batches(cfg, state.step + 1, state.train_seconds)
    run.feed.set_progress(run_progress(cfg, state.step + 1, state.train_seconds))
    micro = [run.feed.next() for _ in range(count)]
    if run.flops is not None:
        run.flops.count(micro)
    n_tokens = sum(num_tokens(b) for b in micro) * run.world
    micro = [to_device(b, run.device) for b in micro]
    if cfg.compile and run.feed.shapes_vary:
        micro = [dynamic_shapes(b) for b in micro]
    state.micro_batches = count
    with _memory_of(micro[0]):
        _accumulate_gradients(run, state, micro)
        _update(run, state)
    elapsed = time.perf_counter() - started
    state.step += 1
    state.tokens += n_tokens
    state.window_steps += count
    state.window_tokens += n_tokens
    state.train_seconds += elapsed
    state.window_seconds += elapsed
    if state.step % cfg.log_every == 0 or final_step(run, state):
        _log_window(run, state, time.perf_counter() - started - elapsed)
    # every step moves the bar, the time and the tokens; the figures read from the device (a
    # host sync) change at log steps only, say which, and a plain line waits for the first
    elif state.logged_at is not None or run.progress.drawing():
        run.progress.update(state.step, elapsed=state.train_seconds, note=progress_note(
            state.tokens, state.train_metrics, state.logged_at))


def _log_window(run: Run, state: State, waited: float = 0.0) -> None:
    """The steps since the last log line into metrics.jsonl and the progress. `waited`:
    time spent waiting on the device, only visible after the log's sync."""
    _log_training(run, state)
    state.train_seconds += waited
    state.train_metrics["tokens_per_second"] = state.window_tokens / max(
        state.window_seconds + waited, 1e-9)
    if run.flops is not None:
        state.train_metrics["mfu"] = run.flops.window(state.window_seconds + waited)
    _write_training_record(run, state)
    state.logged_at = state.step
    if run.cores is not None and (warning := run.cores.warning()):
        run.progress.say(warning)
        run.cores = None  # said once
    run.progress.update(state.step, elapsed=state.train_seconds, note=progress_note(
        state.tokens, state.train_metrics, state.logged_at))


def _compile_each_shape(run: Run) -> None:
    """A compiled run's graphs made before its clock starts: a micro-batch of each shape its
    batches take (`first_batches`) forward and backward as a step runs them, the gradients
    then dropped and the random state (dropout's) put back, so that the steps are those of a
    run without it."""
    saved = rng_state()
    micro = [dynamic_shapes(to_device(b, run.device)) for b in run.feed.batches.first_batches()]
    for batch in micro:
        with _memory_of(batch):
            _accumulate_gradients(run, State(), [batch])
    run.optimizer.zero_grad(set_to_none=True)
    set_rng_state(saved)


def _accumulate_gradients(run: Run, state: State, micro: list[dict]) -> None:
    weights = _micro_weights(run, micro)
    for i, batch in enumerate(micro):
        last = i == len(micro) - 1
        # DDP all-reduces gradients on the last micro-batch only
        no_sync = run.objective.no_sync() if run.distributed and not last \
            else contextlib.nullcontext()
        with no_sync:
            with autocast(run.device, run.cfg.precision):
                loss, metrics = run.objective(batch)
            run.scaler.scale(loss.float() * weights[i]).backward()
        if run.distributed and run.target_count is not None:
            # the loss logged is the global batch's mean over its targets, not the mean of
            # the ranks' means (ranks holding more targets weigh more): as one process logs
            loss = loss.detach().float() * weights[i] * len(micro)
        for k, v in {"loss": loss, **metrics}.items():
            v = v.detach().float()
            state.sums[k] = state.sums[k] + v if k in state.sums else v


def _update(run: Run, state: State) -> None:
    cfg, optimizer = run.cfg, run.optimizer
    run.scaler.unscale_(optimizer)
    if cfg.clip_norm > 0:
        params = [p for g in optimizer.param_groups for p in g["params"]]
        grad_norm = nn.utils.clip_grad_norm_(params, cfg.clip_norm, foreach=True)
        state.sums["grad_norm"] = state.sums.get("grad_norm", 0) \
            + grad_norm.detach() * state.micro_batches
    factor = lr_factor(cfg, state.step + 1, state.train_seconds)
    for group in optimizer.param_groups:
        group["lr"] = group["peak_lr"] * factor
    run.scaler.step(optimizer)
    run.scaler.update()
    optimizer.zero_grad(set_to_none=True)


def _log_training(run: Run, state: State) -> None:
    """The mean figures since the last log line, over every rank: the host sync, once per
    cfg.log_every steps."""
    names = sorted(state.sums)
    values = torch.stack([state.sums[k] for k in names])
    if run.distributed:
        dist.all_reduce(values)
        values = values / run.world
    state.train_metrics = {k: v / state.window_steps for k, v in zip(names, values.tolist())}
    state.train_metrics["learning_rate"] = run.optimizer.param_groups[0]["lr"]


def _write_training_record(run: Run, state: State) -> None:
    run.log.record({"step": state.step, "split": "train", "tokens": state.tokens,
                    "seconds": round(state.train_seconds, 3), **state.train_metrics})
    state.sums, state.window_steps, state.window_tokens, state.window_seconds = {}, 0, 0, 0.0


def _check_stop(run: Run, state: State, stop: StopSignal) -> None:
    """Out of time, or a signal: ranks agree at log steps (one all-reduce); a single process
    stops after any step."""
    logged = state.step % run.cfg.log_every == 0 or final_step(run, state)
    if run.distributed and not logged:
        return
    # 2: a signal, 1: out of time; the ranks take the largest, so a signal that reached one
    # rank alone stops every rank as interrupted (a rank that stopped for time would evaluate
    # while the others checkpoint: each waiting in its own collective)
    reason = 2.0 if stop.signum is not None else float(
        run.cfg.max_time is not None and state.train_seconds >= 60 * run.cfg.max_time)
    if run.distributed:
        flag = torch.tensor([reason], device=run.device)  # NCCL takes no CPU tensor
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        reason = flag.item()
    if reason:
        state.stopped_by = "interrupted" if reason == 2 else "max_time"
        if reason == 1 and not logged and state.window_steps:
            # the run ends between log steps: the steps since the last line are logged too,
            # or a short run would end with no training figures (`train: 0 steps`, no
            # loss.png); an interrupted one logs them as its resume goes on, as if unbroken
            _log_window(run, state)


def _checkpoint(run: Run, state: State) -> None:
    """Every rank's generators and data position, gathered; rank 0 writes."""
    ranks = [{"rng": rng_state(), "feed": run.feed.state_dict()}]
    if run.distributed:
        gathered = [None] * run.world
        dist.all_gather_object(gathered, ranks[0])
        ranks = gathered
    state.last_checkpoint_step = state.step
    if run.main:
        save_checkpoint(run.checkpoints, state.step, model=run.model, optimizer=run.optimizer,
                        keep=run.cfg.keep_checkpoints,
                        state={**state.saved(), "scaler": run.scaler.state_dict(),
                               "ranks": ranks, "fingerprint": run.fingerprint})
    if run.distributed:  # the others wait for the save in Python, not in the next all-reduce
        signals.wait(dist.barrier(async_op=True))
    if state.stopped_by == "interrupted":
        run.log.say(f"saved a checkpoint at step {state.step}; continue with --resume")


def _finish(run: Run, state: State, save: Callable[[nn.Module, Path], object] | None) -> None:
    """The last evaluation, the loss plot, the best weights back if asked, the final model."""
    cfg, interrupted = run.cfg, state.stopped_by == "interrupted"
    run.feed.close()
    run.progress.finish(done=state.step)  # an interruption between log steps: its own step
    if run.flops is not None and (words := run.flops.run_words()) is not None:
        run.log.say(f"model FLOP utilisation: {words}")
    if run.evaluate is not None and state.last_eval_step != state.step and not interrupted:
        run_evaluation(run, state)
    run.log.close()
    if run.main:
        draw_or_skip(lambda: plot_loss(run.out_dir / "metrics.jsonl", run.out_dir / "loss.png",
                                       metric=cfg.best_metric, best_step=state.best_step),
                     run.out_dir / "loss.png")
        if not interrupted:
            if cfg.best_metric is not None and cfg.restore_best \
                    and state.best_step not in (None, state.step):
                run.model.load_state_dict(load_file(str(run.checkpoints / "best.safetensors")),
                                          strict=False)
                run.log.say(f"final model = best evaluation ({cfg.best_metric} "
                            f"{state.best_value:.4g} at step {state.best_step})")
            (save or save_model)(run.model, run.out_dir)
    if run.distributed:
        # Ranks leave together once rank 0 has written, and drop DDP (its communication
        # hooks) before anyone tears the process group down.
        run.objective = None
        signals.wait(dist.barrier(async_op=True))


__all__ = ["train", "TrainResult", "check_config"]

