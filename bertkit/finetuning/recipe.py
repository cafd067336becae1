"""Fine-tuning: a pretrained encoder, a task head, labelled data, and the shared training loop.

    result = finetune("classify", model_dir, train_file, dev_file, out_dir, FinetuneConfig())
    result = finetune(Tag(scheme="BIO"), model_dir, train_file, None, out_dir)

Tasks: classify (one text; single- or multi-label), pair (two texts through the same head),
regress (a number), tag (a label per word; optional CRF), qa (extractive, SQuAD 1.1 / 2.0),
spans (span-based NER, nested entities allowed), one class each in bertkit.finetuning.tasks;
the recipe only calls their protocol (bertkit.finetuning.task.Task), so a Task class of one's
own fine-tunes the same way. The result is a Hugging Face directory that transformers loads as
the matching Bert*For* model, plus bertkit_task.json (task, columns, labels, scheme,
thresholds) that `bertkit evaluate` / `predict` read, and README.md, its model card: the card of
the model fine-tuned from with a section on the run (`card_section`). A task's settings
(columns, scheme, CRF, pooling, ...) are fields of its class; FinetuneConfig holds how it is
trained, whatever the task. What is trained under the head is a `Backbone` (bertkit.finetuning.backbone).

Defaults follow what works for small BERTs: lr 5e-5 for the encoder (2e-4 for a tiny or mini
model, `Defaults.small_model_lr`, in every task but qa) and a larger one for the freshly
initialised head, 10% warm-up then linear decay, evaluation every epoch with early stopping on
the dev metric, the best checkpoint kept; 3 epochs at batch 32 for sentences (10 for a model of
the tiny or mini size, `Defaults.small_model_epochs`), 10 epochs at batch 16 for tagging, where
more, smaller steps pay; a CRF over the tags.

A run never loses its work: Ctrl-C or SIGTERM finishes the step and saves a checkpoint in
OUT/checkpoints (so do `save_every` steps), and `resume=True` goes on from the latest one with
the model, optimizer, schedule, generators, data position and best-so-far restored: the result
equals that of an uninterrupted run, bit for bit.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import torch
from torch import nn

from bertkit.config import ConfigError, TrainConfig, parse_minutes
from bertkit.figures import draw_or_skip
from bertkit.files import UserError, check_not_input, write_json
from bertkit.finetuning.backbone import Backbone, Encoder, build_task_model, freeze, warn_memory
from bertkit.finetuning.baselines import baseline_comparison
from bertkit.finetuning.batches import EpochBatches, rank_targets
from bertkit.finetuning.data_parallel import check_ranks, ranks_joined
from bertkit.finetuning.inputs import Item, warn_cut
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.run_card import CARD_TITLE, card_section
from bertkit.finetuning.input_sources import input_file, input_identity, input_name
from bertkit.finetuning.task import Task, task_settings
from bertkit.finetuning.tasks import task_type
from bertkit.model import hub
from bertkit.model.card import read_card, write_card
from bertkit.runtime import choose_precision, resolve_device
from bertkit.training.distributed import rank_info
from bertkit.training.loop import train
from bertkit.training.resume import check_resume
from bertkit.training.settings import run_settings, settings_block


@dataclass
class FinetuneConfig:
    """How a task is trained, whatever the task: the task's own settings (columns, scheme,
    CRF, pooling, ...) are fields of its class (bertkit.finetuning.tasks). max_time may be
    given as a duration, "90s", "1h30m" (`bertkit.config.parse_minutes`): it is kept in
    minutes."""
    epochs: int | None = None
    """Passes over the training data; none: the task's default for the model's size (classify,
    pair and regress 3, or 10 under 5M block weights; tag and spans 10; qa 3; embed 1)."""
    lr: float | None = None
    """Peak learning rate of the encoder; none: the task's default for the model's size (5e-5,
    embed 2e-5; 2e-4 under 5M block weights in every task but qa)."""
    head_lr: float | None = None
    """Peak learning rate of the head (and CRF); none: the task's default (1e-3)."""
    batch_size: int | None = None
    """Examples per step; none: the task's default (32; tag, spans and qa 16)."""
    max_length: int | None = None
    """Longest input in tokens (longer ones are cut; QA contexts are windowed); none: the
    task's default (128; qa 384)."""
    train_layers: int | None = None
    """Encoder blocks trained: none: all; 0 freezes the encoder (head only); k: the top k."""
    layer_mix: bool = False
    """The head reads a learned softmax-weighted, scaled sum of all the encoder's layers
    (ELMo's scalar mix, Peters et al. 2018) instead of the last one; with
    --train-layers 0, ELMo's way: a frozen encoder and a mix learned for the task."""
    warmup: float = 0.1
    """Linear warm-up as a fraction of all steps, then linear decay to zero."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases and LayerNorms)."""
    patience: int | None = 3
    """Stop after this many evaluations without a better dev figure; none: never early."""
    evals_per_epoch: int = 1
    """Dev evaluations per epoch (the best one is kept)."""
    dev_fraction: float = 0.1
    """Without a dev file, this share of the training data (whole articles for QA) is held out."""
    seed: int = 0
    """Seeds head initialisation, batch order and dropout."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """fp32 or bf16 (autocast); auto: bf16 on a GPU that supports it or a CPU that multiplies
    it natively (measured at start, as pretraining does), else fp32."""
    max_time: float | None = dataclasses.field(default=None, metadata={"duration": True})
    """Stop after this many minutes of training; without --epochs the learning-rate schedule
    then decays over the time budget instead of the default epochs."""
    save_every: int | None = None
    """Steps between checkpoints in OUT/checkpoints, from which --resume goes on after a kill;
    none: only Ctrl-C and SIGTERM save one. They are removed when the run ends."""
    resume: bool = False
    """Go on from the latest checkpoint in OUT/checkpoints (a run stopped by Ctrl-C, SIGTERM or
    a kill), with the same settings and data (from standard input: the same bytes); a fresh
    start if there is none."""
    device: str = "auto"
    """Where the model trains: auto (CUDA when there is one, else the CPU), cpu, cuda,
    cuda:1, ...; under torchrun, auto and cuda give each rank its LOCAL_RANK GPU."""
    dist_timeout: float = 600.0
    """Under torchrun: seconds a rank waits for the others in one collective (rank 0's dev
    evaluation and save included) before the run stops with one line."""
    tensorboard: bool = False
    """Also write the logged figures as TensorBoard scalars into OUT/tensorboard (needs the
    tensorboard package)."""
    show_progress: bool = True
    """Progress lines on stderr."""

    def __post_init__(self) -> None:
        def bad(name: str, wanted: str):
            return UserError(f"--{name.replace('_', '-')} must be {wanted}, got "
                             f"{getattr(self, name)}")

        if isinstance(self.max_time, str):
            try:
                self.max_time = parse_minutes(self.max_time, "--max-time")
            except ConfigError as e:
                raise UserError(str(e)) from None
        for name in ("epochs", "batch_size", "max_length", "evals_per_epoch", "patience",
                     "save_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise bad(name, "at least 1")
        for name in ("lr", "head_lr", "max_time", "dist_timeout"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise bad(name, "positive")
        for name in ("weight_decay", "train_layers"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise bad(name, "at least 0")
        if not 0 <= self.warmup <= 1:
            raise bad("warmup", "in [0, 1]")
        if not 0 < self.dev_fraction < 1:
            raise bad("dev_fraction", "in (0, 1)")


# How a run is driven, not what it learns: free to differ between a run and its resume.
_RUN_CONTROL = ("save_every", "resume", "device", "dist_timeout", "tensorboard",
                "show_progress")
_WHEN_ON = ("gather_across_devices",)  # newer than some checkpoints: recorded only when on


@dataclass
class FinetuneResult:
    out_dir: Path
    dev_metrics: dict
    """Scores of the saved model on dev (thresholds tuned), as in dev_metrics.json: with the
    baseline's under "baseline"."""
    steps: int
    train_seconds: float
    stopped_by: str
    """"epochs" (all of them done), "max_time", "early_stop", or "interrupted" (Ctrl-C or
    SIGTERM: a checkpoint is saved, no model; `resume` goes on)."""
    best_step: int | None
    task: Task
    """The task as saved: labels, columns, tuned thresholds."""
    baseline: dict | None = None
    """The task's trivial predictor's dev scores (also in dev_metrics.json), if it has one."""
    comparison: tuple[str, float, float] | None = None
    """(the selection metric's name, the model's dev value, the baseline's)."""
    train_metrics: dict = dataclasses.field(default_factory=dict)
    """The last logged training figures (loss, learning_rate, tokens_per_second)."""

    @property
    def beats_baseline(self) -> bool | None:
        """Whether the model scores above the baseline on the selection metric; None without
        a baseline to compare with."""
        return None if self.comparison is None else self.comparison[1] > self.comparison[2]

    def summary(self) -> dict:
        """One JSON-able object in the README's metric names: dev scores `dev_*`, the
        baseline's `baseline_*`, the last training figures `train_*`."""
        def numbers(scores: dict) -> dict:
            return {k: v for k, v in scores.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)}

        out = {"out_dir": str(self.out_dir), "steps": self.steps,
               "train_seconds": round(self.train_seconds, 3), "stopped_by": self.stopped_by,
               "best_step": self.best_step,
               **{f"train_{k}": v for k, v in self.train_metrics.items()},
               **{f"dev_{k}": v for k, v in numbers(self.dev_metrics).items()},
               **{f"baseline_{k}": v for k, v in numbers(self.baseline or {}).items()}}
        if self.comparison is not None:
            out["selection"] = self.comparison[0]
        return out


# Data ---------------------------------------------------------------------------------------------

def hold_out(examples: list, fraction: float, seed: int, keys: list | None = None
             ) -> tuple[list, list]:
    """(kept, held out): `fraction` of the examples held out as a dev set, drawn from `seed`
    (whole groups when `keys` names each one's group, e.g. a QA article)."""
    keys = keys if keys is not None else list(range(len(examples)))
    groups = sorted(set(keys))
    if len(groups) < 2:
        raise UserError("too few examples (or articles) to hold out a dev set; pass --dev")
    order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(seed)).tolist()
    held = {groups[i] for i in order[:max(1, round(fraction * len(groups)))]}
    return ([ex for ex, k in zip(examples, keys) if k not in held],
            [ex for ex, k in zip(examples, keys) if k in held])


# Model --------------------------------------------------------------------------------------------

def param_groups(model: nn.Module, lr: float, head_lr: float, weight_decay: float) -> list[dict]:
    """Encoder and head at their own learning rates; no decay on biases and LayerNorms."""
    groups = []
    for part, rate in (("encoder", lr), ("head", head_lr)):
        params = [p for n, p in model.named_parameters() if p.requires_grad
                  and n.startswith("encoder.") == (part == "encoder")]
        for decay in (True, False):
            chosen = [p for p in params if (p.ndim >= 2) == decay]
            if chosen:
                groups.append({"params": chosen, "lr": rate,
                               "weight_decay": weight_decay if decay else 0.0})
    return groups


# The pipeline -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GivenData:
    """The training and dev data as the user gave them, not as the files `input_file` staged
    them in (standard input, rows in memory), whose names differ each run."""
    names: tuple[str, str | None]
    """As messages and training_args.json name them: a path, "<stdin>", "<rows>"."""
    known_as: tuple[str, str | None]
    """As the checkpoint's fingerprint records them, for a resumed run to know them again: by
    their bytes, named as messages name them, "train.jsonl (sha256 ...)" (`input_identity`),
    read before anything is written."""


def finetune(task: str | type[Task] | Task, model_dir: str | Path, train_path, dev_path,
             out_dir: str | Path, cfg: FinetuneConfig | None = None,
             command_line: Callable[[FinetuneConfig, Task], str] | None = None,
             backbone: Backbone | None = None, teacher=None) -> FinetuneResult:
    """Train a task head (and the encoder) on `train_path`, keep the best dev checkpoint, and
    write it to `out_dir` as a Hugging Face directory with bertkit_task.json. The training and
    dev data are files, "-" (standard input), or rows in memory: dicts as a JSONL file holds
    them, or a datasets.Dataset.

    `task` is a Task with its settings (`Tag(scheme="BIO")`), a Task class (its defaults) or
    a name from `bertkit.finetuning.tasks.TASKS`; `cfg` holds the training settings. Stopped
    by Ctrl-C or SIGTERM, it returns with `stopped_by="interrupted"` and a checkpoint in
    `out_dir`, from which `cfg.resume` goes on (given the same data: the same bytes, under
    any path, piped in or as rows). The settings, the defaults filled in, go to
    OUT/training_args.json with `command_line(resolved cfg, settled task)` (the CLI's shell
    line). `backbone` trains another model family in BERT's place
    (`bertkit.finetuning.backbone.Backbone`, e.g. bertkit.finetuning.cnn.CnnBackbone); none:
    the pretrained encoder of `model_dir`. `teacher`: a fine-tuned model of the task whose
    outputs the student learns (`bertkit.finetuning.teacher.Teacher`; its `student` backbone
    is N of its layers). Under torchrun the same call trains data-parallel
    (`bertkit.finetuning.data_parallel`): each rank takes its share of every batch of
    `cfg.batch_size` examples, and rank 0 writes."""
    cfg = cfg or FinetuneConfig()
    sources = {"--train": train_path, "--dev": dev_path}
    with ranks_joined(cfg.device, cfg.dist_timeout, sources) as device, \
            input_file(train_path) as train, input_file(dev_path) as dev:
        cfg = cfg if device is None else dataclasses.replace(cfg, device=str(device))
        given = GivenData((input_name(train_path), input_name(dev_path)),
                          (input_identity(train_path, train), input_identity(dev_path, dev)))
        return _finetune(task, model_dir, train, dev, out_dir, cfg, command_line, backbone,
                         given, teacher)


def task_of(task: str | type[Task] | Task) -> Task:
    """A task with its settings: as given, a class's defaults, or the defaults of the task of
    that name in TASKS."""
    if isinstance(task, str):
        task = task_type(task)
    return task() if isinstance(task, type) else task


@dataclass(frozen=True)
class RunPlan:
    """A run's settings resolved and checked before any data is read or anything printed."""
    task: Task
    """Its settings made concrete for the data and the model (labels still to come)."""
    cfg: FinetuneConfig
    """The training settings with the task's defaults spelled out."""
    epochs: int
    """The epochs the schedule is laid over (`cfg.epochs` stays None under a time budget)."""
    backbone: Backbone
    model_dir: Path
    train_path: Path
    dev_path: Path | None
    out_dir: Path
    names: tuple[str, str | None]
    """The training and dev data as messages name them (`GivenData.names`): "<stdin>", not
    the file `train_path` it was staged in."""
    model_name: str = ""
    """The model as the user gave it (a path, a hub name), as the model card names it."""
    source_card: str | None = None
    """The model card (README.md) of the model fine-tuned from, read before training (one
    that is no UTF-8 text is refused then, not after the run); None where it has none."""
    distillation: dict = dataclasses.field(default_factory=dict)
    """A teacher's settings (`Distillation.options`), where a teacher teaches."""


def plan_run(task: Task, model_dir: str | Path, train_path: Path, dev_path: Path | None,
             out_dir: str | Path, cfg: FinetuneConfig, backbone: Backbone | None,
             names: tuple[str, str | None] | None = None) -> RunPlan:
    """The checks a run can make before reading its data, and its settings resolved: the
    device and precision, the task's defaults for this model, the task's settings for the
    training file and the model. `names`: the data as messages name it; none: its paths."""
    model_name = hub.hub_name(model_dir) or str(model_dir)  # a snapshot said by its Hub name
    model_dir = hub.resolve_model(model_dir)  # a directory, or a Hub name: fetched
    device = resolve_device(cfg.device)
    cfg = dataclasses.replace(cfg, device=str(device))
    out_dir = Path(out_dir)
    check_not_input(out_dir, [model_dir, train_path, dev_path],
                    names=["model", "training file", "dev file"])
    source_card = read_card(model_dir)
    task = task.configure(Path(train_path))
    backbone = backbone or Encoder(model_dir, cfg.train_layers, cfg.layer_mix)
    backbone.check_task(task)
    task = task.for_backbone(backbone)
    defaults, weights = task.defaults, backbone.block_weights
    epochs = cfg.epochs or defaults.epochs_for(weights)
    max_length = cfg.max_length or min(defaults.max_length, backbone.max_positions)
    if max_length > backbone.max_positions:
        raise UserError(f"--max-length {max_length} is longer than the model's "
                        f"{backbone.max_positions} positions")
    task = dataclasses.replace(task, max_length=max_length)
    # The task's defaults spelled out. A time budget without --epochs keeps epochs None: the
    # schedule then follows the clock.
    cfg = dataclasses.replace(cfg, epochs=cfg.epochs or (None if cfg.max_time else epochs),
                              batch_size=cfg.batch_size or defaults.batch_size,
                              lr=cfg.lr or defaults.lr_for(weights),
                              head_lr=cfg.head_lr or defaults.head_lr, max_length=max_length)
    names = names or (str(train_path), None if dev_path is None else str(dev_path))
    return RunPlan(task, cfg, epochs, backbone, model_dir, Path(train_path), dev_path, out_dir,
                   names, model_name, source_card)


def run_options(plan: RunPlan) -> dict:
    """The run's settings as training_args.json records them: the training settings and the
    task's, one flat table (as the command line spells them)."""
    return {**dataclasses.asdict(plan.cfg), **task_settings(plan.task), **plan.distillation}


def read_data(plan: RunPlan) -> tuple[Task, list, list]:
    """(the task with the training data's labels, training examples, dev examples): the dev
    file, or without one `cfg.dev_fraction` of the training data held out."""
    task, cfg = plan.task, plan.cfg
    train_examples = task.read(plan.train_path)
    if plan.dev_path is None:
        train_examples, dev = hold_out(train_examples, cfg.dev_fraction, cfg.seed,
                                       task.groups(train_examples))
    else:
        dev = task.read(plan.dev_path)
    return task.with_labels(train_examples, dev), train_examples, dev


def training_items(plan: RunPlan, task: Task, train_examples: list, dev: list) -> list[Item]:
    """The model inputs of the training examples; what is cut (training or dev) said once."""
    tokenizer = plan.backbone.tokenizer
    items = task.encode(tokenizer, train_examples, training=True)
    if not items:
        raise UserError(f"{plan.names[0]}: nothing to train on")
    plan.backbone.check_fit(items)
    warn_cut(items, len(train_examples), task.max_length, plan.names[0])
    # said once here, not at every evaluation
    warn_cut(task.encode(tokenizer, dev, skip_no_room=True), len(dev), task.max_length,
             plan.names[1] or f"{plan.names[0]} (its dev part)")
    return items


class DevScores:
    """The loop's `evaluate` and `save`: dev scores at each evaluation; at the end, the
    thresholds tuned on dev, the final scores and the baseline, and the model saved with its
    card."""

    def __init__(self, plan: RunPlan, runner: TaskModel, train_examples: list, dev: list):
        self.plan, self.runner = plan, runner
        self.train_examples, self.dev = train_examples, dev
        self.final: dict = {}
        """The saved model's dev scores (dev_metrics.json)."""

    def evaluate(self, model: nn.Module) -> dict:
        scores = self.runner.evaluate(self.dev)
        out = {f"dev_{k}": float(v) for k, v in scores.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
        out["dev_selection"] = float(self.runner.task.selection(scores))
        return out

    def _score_the_start(self) -> dict:
        """Dev scores of the model before fine-tuning, built again from the backbone (a
        resumed run never held it); what the build warns of, the run said when it began."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = self.plan.backbone.build(self.runner.task, self.plan.cfg.seed)
        return dataclasses.replace(self.runner, model=start.to(self.runner.device)
                                   ).evaluate(self.dev)

    def save(self, model: nn.Module, path: Path) -> None:
        # The model runs over dev once: the thresholds are tuned on its outputs and the final
        # scores decoded from them (a QA dev set of long contexts takes minutes a run).
        ran = self.runner.remembering(self.dev)
        ran = ran.with_task(ran.task.tune(ran, self.dev))
        task, final = ran.task, self.final
        final.update(ran.evaluate(self.dev))
        self.runner = self.runner.with_task(task)
        baseline = task.baseline(self.train_examples, self.dev, self._score_the_start)
        if baseline is not None:
            final["baseline"] = baseline
        # a module of the model, declared where the backbone built it (--layer-mix)
        mix = model.layer_mix if self.plan.cfg.layer_mix else None
        if mix is not None:  # what the task took from each layer, in numbers and a picture
            final["layer_weights"] = mix.layer_weights().detach().cpu().tolist()
            final["layer_mix_gamma"] = float(mix.gamma.detach())
        task.save_model(self.plan.backbone, model, path, tokenizer=self.plan.backbone.tokenizer,
                        labels=list(task.label_names()) or None)
        write_card(path, self.plan.source_card, CARD_TITLE,  # beside dev_metrics.json
                   card_section(self.plan, task, final, model),
                   {"library_name": task.library_name, "pipeline_tag": task.pipeline_tag,
                    "base_model": hub.hub_name(self.plan.model_name),
                    **({"tags": list(task.card_tags)} if task.card_tags else {})})
        write_json(path / "dev_metrics.json", final)
        if mix is not None:
            from bertkit.embeddings.plots import plot_layer_weights  # matplotlib only here
            name = f"{Path(self.plan.model_dir).name} fine-tuned on {Path(self.plan.names[0]).name}"
            draw_or_skip(lambda: plot_layer_weights({name: final["layer_weights"]},
                                                    path / "layer_weights.png"),
                         path / "layer_weights.png")


def train_config(plan: RunPlan, steps_per_epoch: int) -> TrainConfig:
    """The loop's settings: evaluations per epoch, and the step budget of the epochs or, with
    a time budget and no --epochs, the clock."""
    cfg = plan.cfg
    eval_every = max(1, steps_per_epoch // max(1, cfg.evals_per_epoch))
    max_steps = None if cfg.max_time and not cfg.epochs else plan.epochs * steps_per_epoch
    return TrainConfig(
        lr=cfg.lr, max_steps=max_steps, max_time=cfg.max_time,
        warmup_fraction=cfg.warmup, weight_decay=cfg.weight_decay, eps=1e-8,
        precision=cfg.precision, seed=cfg.seed, log_every=max(1, min(50, eval_every // 4)),
        eval_every=eval_every, best_mode="max", best_metric="dev_selection",
        patience=cfg.patience, restore_best=True, save_every=cfg.save_every, resume=cfg.resume,
        tensorboard=cfg.tensorboard)


def fingerprint(plan: RunPlan, data: tuple[str, str | None]) -> dict:
    """What a checkpoint goes on only with: the data (`data`: the training and dev data as
    `GivenData.known_as`) and every setting that shapes what is learned, one key per setting,
    so that a refusal names the setting that differs."""
    options = {k: v for k, v in run_options(plan).items() if k not in _RUN_CONTROL
               and not (k in _WHEN_ON and not v)}
    found = {"task": plan.task.name, "train": data[0], "dev": data[1], **options}
    return json.loads(json.dumps(found, default=str))


def _finetune(task: str | type[Task] | Task, model_dir: str | Path, train_path: Path,
              dev_path: Path | None, out_dir: str | Path, cfg: FinetuneConfig | None,
              command_line: Callable[[FinetuneConfig, Task], str] | None,
              backbone: Backbone | None, given: GivenData, teacher=None) -> FinetuneResult:
    """`finetune` on the files `input_file` gives; `given`: the data as the user gave it."""
    plan = plan_run(task_of(task), model_dir, train_path, dev_path, out_dir,
                    cfg or FinetuneConfig(), backbone, given.names)
    rank, world = rank_info()
    if rank:  # rank 0 speaks for the run
        plan = dataclasses.replace(plan, cfg=dataclasses.replace(plan.cfg, show_progress=False))
    task, train_examples, dev = read_data(plan)  # bad input refused before anything is said
    lesson = teacher.lesson(task) if teacher else None  # its labels, its unlabelled texts
    task = lesson.task if lesson else task
    plan = dataclasses.replace(plan, distillation=teacher.options()) if teacher else plan
    if plan.cfg.precision == "auto":  # measured, as pretraining does: bf16 only where native
        precision = choose_precision(torch.device(plan.cfg.device))[0]
        plan = dataclasses.replace(plan, cfg=dataclasses.replace(plan.cfg, precision=precision))
    cfg = plan.cfg
    model = plan.backbone.build(task, cfg.seed)
    known = fingerprint(plan, given.known_as)
    # a checkpoint of another run refused before the settings are said
    check_resume(plan.out_dir, cfg.resume, model, known)
    settings = run_settings({"task": plan.task.name, "model": plan.model_dir,
                             "train": plan.names[0], "dev": plan.names[1],
                             "out": plan.out_dir,
                             "options": run_options(plan)},
                            device=cfg.device, precision=cfg.precision,
                            command=command_line(cfg, plan.task) if command_line else None)
    if cfg.show_progress:
        print(settings_block(settings), file=sys.stderr)
    warn_memory(plan.backbone, task, cfg.batch_size, torch.device(cfg.device))
    items = training_items(plan, task, train_examples, dev)
    check_ranks(len(items), world, plan.names[0])
    taught = teacher.teach(lesson, plan.backbone, items, train_examples, cfg.device,
                           cfg.show_progress) if teacher else None
    batches = EpochBatches(taught.items if taught else items, taught or task, cfg.batch_size,
                           cfg.seed, rank, world)
    task = task.with_steps(plan.epochs * len(batches))
    runner = TaskModel(model, plan.backbone.tokenizer, task, torch.device(cfg.device),
                       skip_no_room=True, report_cut=False, source=str(plan.model_dir),
                       progress=cfg.show_progress, check_inputs=plan.backbone.check_fit)
    scores = DevScores(plan, runner, train_examples, dev)
    result = train(model, taught.loss if taught else lambda m, batch: (task.loss(m, batch), {}),
                   batches,
                   train_config(plan, len(batches)), plan.out_dir, evaluate=scores.evaluate,
                   param_groups=param_groups(model, cfg.lr, cfg.head_lr, cfg.weight_decay),
                   save=scores.save, fingerprint=known,
                   target_count=rank_targets if world > 1 else None, device=cfg.device,
                   show_progress=cfg.show_progress, settings=settings)
    if result.stopped_by == "interrupted":  # the loop said where its checkpoint is
        return FinetuneResult(plan.out_dir, {}, result.step, result.train_seconds,
                              result.stopped_by, result.best_step, task)
    if rank == 0:
        shutil.rmtree(plan.out_dir / "checkpoints", ignore_errors=True)  # the best: the model
    # The step budget is the epochs: say so rather than "max_steps".
    stopped_by = "epochs" if result.stopped_by == "max_steps" else result.stopped_by
    final, saved = scores.final, scores.runner.task
    baseline = final.get("baseline")
    return FinetuneResult(plan.out_dir, final, result.step, result.train_seconds, stopped_by,
                          result.best_step, saved, baseline,
                          baseline_comparison(final, baseline, saved.selection,
                                              saved.selection_name(final)),
                          dict(result.train_metrics))


__all__ = ["FinetuneConfig", "FinetuneResult", "RunPlan", "finetune", "task_of", "plan_run",
           "hold_out", "build_task_model", "freeze", "param_groups", "EpochBatches"]
