"""Fine-tuning: a pretrained encoder, a task head, labelled data, and the shared training loop.

    result = finetune("classify", model_dir, train_file, dev_file, out_dir, FinetuneConfig())

Tasks: classify (one text; single- or multi-label), pair (two texts through the same head),
regress (a number), tag (a label per word; optional CRF), qa (extractive, SQuAD 1.1 / 2.0),
spans (span-based NER, nested entities allowed), one class each in bertkit.finetuning.tasks;
the recipe only calls their protocol (bertkit.finetuning.task.Task), so a Task class of one's
own fine-tunes the same way. The result is a Hugging Face directory that transformers loads as
the matching Bert*For* model, plus bertkit_task.json (task, columns, labels, scheme,
thresholds) that `bertkit evaluate` / `predict` read.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import torch
from torch import nn

from bertkit.config import TrainConfig
from bertkit.figures import draw_or_skip
from bertkit.files import UserError, check_not_input, write_json
from bertkit.finetuning import heads
from bertkit.finetuning.baselines import baseline_comparison
from bertkit.finetuning.inputs import Item, check_fit, length_batches, warn_cut
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.readers import input_file
from bertkit.finetuning.task import Task
from bertkit.finetuning.tasks import task_type
from bertkit.model import hub
from bertkit.model.scalar_mix import ScalarMix
from bertkit.runtime import choose_precision, resolve_device
from bertkit.text.tokenizer import Tokenizer
from bertkit.training.loop import train
from bertkit.training.settings import run_settings, settings_block


@dataclass
class FinetuneConfig:
    text_column: str | None = None
    """Column of the text; None picks the first of TEXT_COLUMNS the file has."""
    pair_column: str | None = None
    """Column of the second text (pair task); None picks from PAIR_COLUMNS."""
    label_column: str | None = None
    """Column of the label; None picks from LABEL_COLUMNS."""
    multi_label: bool = False
    """classify: several labels per text (a JSON list or `a|b`), sigmoid per label."""
    conllu_column: Literal["upos", "xpos"] = "upos"
    """tag/spans on CoNLL-U: which column holds the tag (upos or xpos)."""
    scheme: Literal["IO", "BIO", "BIOES"] | None = None
    """tag: re-tag the data in IO, BIO or BIOES; None keeps the data's scheme."""
    alignment: Literal["copy", "first"] = "copy"
    """tag: subword labels copied from their word ("copy") or on the first piece ("first")."""
    decode: Literal["first", "mean"] = "first"
    """tag: read a word's label from its first piece ("first", the seeds' default) or average
    its pieces' log-probabilities ("mean"; not with a CRF, which decodes the pieces)."""
    crf: bool | None = None
    """tag: a linear-chain CRF over the labels, with the scheme's invalid transitions barred;
    none: a CRF unless --decode mean (as flair's tagger; the 60-minute `mini` of
    docs/pretraining.md gets WNUT-16 F1 0.318 with it against 0.224 without, POS 0.926
    against 0.924)."""
    case_feature: bool | None = None
    """tag, spans: add each word's letter case (lower, Capitalised, UPPER, ...) to the
    encoder's input as a learned embedding; none: on when the model's tokenizer lowercases,
    which loses the capitals that mark names (WNUT-16 F1 with the 60- and 120-minute `mini`
    of docs/pretraining.md, three seeds each: 0.295 and 0.271 with it, 0.280 and 0.232
    without; MiniLM 0.564 against 0.542). Such a model is saved as a BertModel /
    ModernBertModel with its head beside."""
    pooling: Literal["cls", "mean"] | None = None
    """classify, pair, regress: what the head reads, [CLS] ("cls"; through the pooler for a
    "bert" encoder) or the mean of the last layer over the tokens ("mean"); none: "mean" for
    a "modern" encoder, whose masked-LM pretraining never trains [CLS], "cls" for "bert"
    (BERT's pretraining trains it for next-sentence prediction). The 60-minute `mini` of
    docs/pretraining.md, three seeds each: SICK 0.711 by the mean against 0.689 by [CLS],
    movie reviews 0.786 against 0.777."""
    epochs: int | None = None
    """Passes over the training data; None = the task's default for the model's size
    (`Task.defaults.epochs_for`: classify, pair and regress 3, or 10 under 5M block weights;
    tag and spans 10; qa 3)."""
    lr: float | None = None
    """Peak learning rate of the encoder; None = the task's default for the model's size
    (`Task.defaults.lr_for`: 5e-5, or 2e-4 under 5M block weights in every task but qa)."""
    head_lr: float | None = None
    """Peak learning rate of the head (and CRF); None = the task's default."""
    batch_size: int | None = None
    """Examples per step; None = the task's default."""
    max_length: int | None = None
    """Longest input in tokens (longer ones are cut; QA contexts are windowed)."""
    train_layers: int | None = None
    """None trains everything; 0 freezes the encoder (head only); k trains the top k blocks."""
    layer_mix: bool = False
    """The head reads a learned softmax-weighted, scaled sum of all the encoder's layers
    (ELMo's scalar mix, bertkit.model.scalar_mix) instead of the last one; with
    --train-layers 0, ELMo's way: a frozen encoder and a mix learned for the task."""
    warmup: float = 0.1
    """Linear warm-up as a fraction of all steps, then linear decay to zero."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases and LayerNorms)."""
    patience: int | None = 3
    """Stop after this many evaluations without a better dev figure; None never stops early."""
    evals_per_epoch: int = 1
    """Dev evaluations per epoch (the best one is kept)."""
    dev_fraction: float = 0.1
    """Without a dev file, this share of the training data (whole articles for QA) is held out."""
    seed: int = 0
    """Seeds head initialisation, batch order and dropout."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """fp32 or bf16 (autocast); auto: bf16 on a GPU that supports it or a CPU that multiplies
    it natively (measured at start, as pretraining does), else fp32."""
    max_span_width: int = 8
    """spans: longest entity in words."""
    span_null_weight: float = 0.25
    """spans: weight of NULL spans in the loss (entity spans weigh 1)."""
    span_ffn: int = 150
    """spans: width of the start / end FFNs and of the classifier's hidden layer."""
    stride: int = 128
    """qa: tokens shared by consecutive windows of a long context."""
    max_answer_tokens: int = 30
    """qa: longest answer in tokens."""
    max_time: float | None = None
    """Stop after this many minutes of training; without `epochs` the learning-rate schedule
    then decays over the time budget instead of the default epochs."""
    save_every: int | None = None
    """Steps between checkpoints in OUT/checkpoints, from which --resume goes on after a kill;
    none: only Ctrl-C and SIGTERM save one. They are removed when the run ends."""
    resume: bool = False
    """Go on from the latest checkpoint in OUT/checkpoints (a run stopped by Ctrl-C, SIGTERM or
    a kill), with the same settings; a fresh start if there is none."""
    device: str = "auto"
    """Where the model trains: auto (CUDA when there is one, else the CPU), cpu, cuda,
    cuda:1, ..."""
    tensorboard: bool = False
    """Also write the logged figures as TensorBoard scalars into OUT/tensorboard (needs the
    tensorboard package)."""
    show_progress: bool = True
    """Progress lines on stderr."""


# How a run is driven, not what it learns: free to differ between a run and its resume.
_RUN_CONTROL = ("save_every", "resume", "device", "tensorboard", "show_progress")


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

def _split(examples: list, fraction: float, seed: int, keys: list | None = None
           ) -> tuple[list, list]:
    """Hold out `fraction` of the examples (whole groups when `keys` names each one's group)."""
    keys = keys if keys is not None else list(range(len(examples)))
    groups = sorted(set(keys))
    if len(groups) < 2:
        raise UserError("too few examples (or articles) to hold out a dev set; pass --dev")
    order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(seed)).tolist()
    held = {groups[i] for i in order[:max(1, round(fraction * len(groups)))]}
    return ([ex for ex, k in zip(examples, keys) if k not in held],
            [ex for ex, k in zip(examples, keys) if k in held])


class EpochBatches:
    """Length-bucketed, shuffled batches, a new order each epoch; resumable."""

    def __init__(self, items: list[Item], task: Task, batch_size: int, seed: int):
        self.items, self.task, self.batch_size, self.seed = items, task, batch_size, seed
        self.lengths = [len(it.ids) for it in items]
        # the pass, and how many of its batches were handed out: a new iterator (a resumed
        # run's) starts after them
        self.epoch, self.served = 0, 0

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        order = length_batches(self.lengths, self.batch_size, g)
        for idx in order[self.served:]:
            self.served += 1  # counted from the pass's start, so a second resume lands right
            yield self.task.collate([self.items[i] for i in idx])
        self.epoch, self.served = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "served": self.served}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.served = state["epoch"], state["served"]


# Model --------------------------------------------------------------------------------------------

def with_pooling(task: Task, asked: str | None, architecture: str | None) -> Task:
    """The task with its sentence pooling settled: as `asked`, else "mean" for a "modern"
    encoder and "cls" for "bert". Only the sentence tasks of a transformer encoder
    (`architecture`; None for a backbone) have it."""
    has = any(f.name == "pooling" for f in dataclasses.fields(task))
    if asked is not None and not has:
        raise UserError(f"--pooling is for the classify, pair and regress tasks, not {task.name}")
    if asked is not None and architecture is None:
        raise UserError("--pooling needs a transformer encoder, which this backbone is not")
    if not has or architecture is None:
        return task
    if asked is not None and asked not in heads.POOLINGS:
        raise UserError(f"--pooling must be one of {', '.join(heads.POOLINGS)}, got {asked!r}")
    return dataclasses.replace(task, pooling=asked or ("mean" if architecture == "modern"
                                                       else "cls"))


def with_case_feature(task: Task, asked: bool | None, tokenizer, encoder: bool) -> Task:
    """The task with its word-case feature settled: as `asked`, else on where the tokenizer
    lowercases. Only the word tasks (tag, spans) of a transformer encoder have it."""
    has = any(f.name == "case_feature" for f in dataclasses.fields(task))
    if asked and not has:
        raise UserError(f"--case-feature is for the tag and spans tasks, not {task.name}")
    if asked and not encoder:
        raise UserError("--case-feature needs a transformer encoder, which this backbone "
                        "is not")
    if not has or not encoder:
        return task
    lowercases = bool(getattr(tokenizer, "do_lower_case", False))
    return dataclasses.replace(task, case_feature=lowercases if asked is None else asked)


def build_task_model(task: Task, model_dir: str | Path, seed: int,
                     train_layers: int | None = None, layer_mix: bool = False) -> nn.Module:
    """The pretrained encoder of `model_dir` with the task's head, initialised from `seed`
    (with `layer_mix`, the head reads a learned mix of all layers)."""
    model = task.make_model(hub.load_encoder(model_dir))
    if layer_mix:
        model.layer_mix = ScalarMix(model.encoder.config.num_layers + 1)
    heads.init_head(model, torch.Generator().manual_seed(seed))
    freeze(model, train_layers)
    return model


def freeze(model: nn.Module, train_layers: int | None) -> None:
    """Train everything (None), only the head (0), or the head and the top k blocks."""
    if train_layers is None:
        return
    enc = model.encoder
    if not 0 <= train_layers <= len(enc.blocks):
        raise UserError(f"--train-layers must be between 0 and {len(enc.blocks)}, "
                        f"got {train_layers}")
    enc.requires_grad_(False)
    for block in enc.blocks[len(enc.blocks) - train_layers:]:
        block.requires_grad_(True)
    if train_layers > 0:
        for top in (enc.pooler, enc.final_norm):  # whichever the architecture has
            if top is not None:
                top.requires_grad_(True)


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

def finetune(task: str | type[Task], model_dir: str | Path, train_path, dev_path,
             out_dir: str | Path, cfg: FinetuneConfig | None = None,
             command_line: Callable[[FinetuneConfig], str] | None = None,
             backbone=None) -> FinetuneResult:
    """Train a task head (and the encoder) on `train_path`, keep the best dev checkpoint, and
    write it to `out_dir` as a Hugging Face directory with bertkit_task.json. The training and
    dev data are files, "-" (standard input), or rows in memory: dicts as a JSONL file holds
    them, or a datasets.Dataset.

    `task` is a name from `bertkit.finetuning.tasks.TASKS` or a Task class. Stopped by Ctrl-C
    or SIGTERM, it returns with `stopped_by="interrupted"` and a checkpoint in `out_dir`, from
    which `cfg.resume` goes on. The settings, the task's defaults filled in, go to
    OUT/training_args.json with `command_line(resolved cfg)` (the CLI's shell line). `backbone` trains another model family in
    BERT's place (its `tokenizer`, `max_positions`, `build(task, seed)` and `save(model, path,
    task=, tokenizer=, labels=)`: bertkit.finetuning.cnn.CnnBackbone)."""
    with input_file(train_path) as train, input_file(dev_path) as dev:
        return _finetune(task, model_dir, train, dev, out_dir, cfg, command_line,
                         backbone)


def _finetune(task: str | type[Task], model_dir: str | Path, train_path: Path,
              dev_path: Path | None, out_dir: str | Path, cfg: FinetuneConfig | None,
              command_line: Callable[[FinetuneConfig], str] | None,
              backbone=None) -> FinetuneResult:
    cfg = cfg or FinetuneConfig()
    model_dir = hub.resolve_model(model_dir)  # a directory, or a name in the local HF cache
    device = resolve_device(cfg.device)
    cfg = dataclasses.replace(cfg, device=str(device))
    out_dir = Path(out_dir)
    if cfg.save_every is not None and cfg.save_every < 1:
        raise UserError(f"--save-every must be at least 1, got {cfg.save_every}")
    check_not_input(out_dir, [model_dir, train_path, dev_path],
                    names=["model", "training file", "dev file"])
    kind = task_type(task) if isinstance(task, str) else task
    setting = kind.configure(cfg, Path(train_path))
    defaults = kind.defaults
    encoder = None if backbone else hub.load_config(model_dir)
    weights = encoder.block_weights if encoder else None
    epochs = cfg.epochs or defaults.epochs_for(weights)
    batch_size = cfg.batch_size or defaults.batch_size
    head_lr = cfg.head_lr or defaults.head_lr
    lr = cfg.lr or defaults.lr_for(weights)
    tokenizer = backbone.tokenizer if backbone else Tokenizer.load(model_dir)
    setting = with_case_feature(setting, cfg.case_feature, tokenizer, backbone is None)
    setting = with_pooling(setting, cfg.pooling, encoder.architecture if encoder else None)
    max_positions = backbone.max_positions if backbone else encoder.max_positions
    if cfg.max_length is None:  # the task's default, within what the model takes
        setting = dataclasses.replace(setting, max_length=min(setting.max_length, max_positions))
    if setting.max_length > max_positions:
        raise UserError(f"--max-length {setting.max_length} is longer than the model's "
                        f"{max_positions} positions")
    # The task's defaults spelled out. A time budget without --epochs keeps epochs None: the
    # schedule then follows the clock.
    cfg = dataclasses.replace(cfg, epochs=cfg.epochs or (None if cfg.max_time else epochs),
                              batch_size=batch_size, lr=lr, head_lr=head_lr,
                              max_length=setting.max_length,
                              case_feature=getattr(setting, "case_feature", cfg.case_feature),
                              pooling=getattr(setting, "pooling", cfg.pooling))
    train_examples = setting.read(train_path)  # bad input refused before anything is printed
    if dev_path is None:
        train_examples, dev = _split(train_examples, cfg.dev_fraction, cfg.seed,
                                     setting.groups(train_examples))
    else:
        dev = setting.read(dev_path)
    setting = setting.with_labels(train_examples, dev)
    if cfg.precision == "auto":  # measured, as pretraining does: bf16 only where it is native
        cfg = dataclasses.replace(cfg, precision=choose_precision(device)[0])
    settings = run_settings({"task": kind.name, "model": model_dir, "train": train_path,
                             "dev": dev_path, "out": out_dir, "options": cfg},
                            device=cfg.device, precision=cfg.precision,
                            command=command_line(cfg) if command_line else None)
    if cfg.show_progress:
        print(settings_block(settings), file=sys.stderr)
    model = backbone.build(setting, cfg.seed) if backbone else \
        build_task_model(setting, model_dir, cfg.seed, cfg.train_layers,
                                                  cfg.layer_mix)
    items = setting.encode(tokenizer, train_examples, training=True)
    if not items:
        raise UserError(f"{train_path}: nothing to train on")
    if backbone is None:  # a backbone builds its model from its own tokenizer
        check_fit(items, tokenizer, model.encoder.config, model_dir)
    warn_cut(items, len(train_examples), setting.max_length, train_path)
    # said once here, not at every evaluation
    warn_cut(setting.encode(tokenizer, dev, skip_no_room=True), len(dev), setting.max_length,
             dev_path or f"{train_path} (its dev part)")
    batches = EpochBatches(items, setting, batch_size, cfg.seed)
    steps_per_epoch = len(batches)
    runner = TaskModel(model, tokenizer, setting, torch.device(cfg.device), skip_no_room=True,
                       report_cut=False, source=str(model_dir))

    def evaluate(m: nn.Module) -> dict:
        scores = runner.evaluate(dev)
        out = {f"dev_{k}": float(v) for k, v in scores.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
        out["dev_selection"] = float(setting.selection(scores))
        return out

    final: dict = {}

    def save(m: nn.Module, path: Path) -> None:
        nonlocal runner
        runner = runner.with_task(setting.tune(runner, dev))
        final.update(runner.evaluate(dev))
        baseline = runner.task.baseline(train_examples, dev)
        if baseline is not None:
            final["baseline"] = baseline
        mix = getattr(m, "layer_mix", None)
        if mix is not None:  # what the task took from each layer, in numbers and a picture
            final["layer_weights"] = mix.layer_weights().detach().cpu().tolist()
            final["layer_mix_gamma"] = float(mix.gamma.detach())
        (backbone.save if backbone else heads.save_task_model)(
            m, path, task=runner.task.to_json(), tokenizer=tokenizer,
            labels=list(runner.task.label_names()) or None)
        write_json(path / "dev_metrics.json", final)
        if mix is not None:
            from bertkit.embeddings.plots import plot_layer_weights  # matplotlib only here
            draw_or_skip(lambda: plot_layer_weights(
                {f"{Path(model_dir).name} fine-tuned on {Path(train_path).name}":
                 final["layer_weights"]}, path / "layer_weights.png"),
                path / "layer_weights.png")

    eval_every = max(1, steps_per_epoch // max(1, cfg.evals_per_epoch))
    # A time budget without --epochs: the schedule follows the clock, as long as it lasts.
    max_steps = None if cfg.max_time and not cfg.epochs else epochs * steps_per_epoch
    train_cfg = TrainConfig(
        lr=cfg.lr, max_steps=max_steps, max_time=cfg.max_time,
        warmup_fraction=cfg.warmup, weight_decay=cfg.weight_decay, eps=1e-8,
        precision=cfg.precision, seed=cfg.seed, log_every=max(1, min(50, eval_every // 4)),
        eval_every=eval_every, best_mode="max", best_metric="dev_selection",
        patience=cfg.patience, restore_best=True, save_every=cfg.save_every, resume=cfg.resume,
        tensorboard=cfg.tensorboard)
    # A checkpoint goes on only with the data and settings it was made with; one key per
    # setting, so that a refusal names the setting that differs.
    fingerprint = {"task": kind.name, "train": str(train_path),
                   "dev": None if dev_path is None else str(dev_path),
                   **{k: v for k, v in dataclasses.asdict(cfg).items() if k not in _RUN_CONTROL}}
    result = train(model, lambda m, batch: (setting.loss(m, batch), {}), batches, train_cfg,
                   out_dir, evaluate=evaluate,
                   param_groups=param_groups(model, cfg.lr, head_lr, cfg.weight_decay),
                   save=save, fingerprint=json.loads(json.dumps(fingerprint, default=str)),
                   device=cfg.device, show_progress=cfg.show_progress, settings=settings)
    if result.stopped_by == "interrupted":  # the loop said where its checkpoint is
        return FinetuneResult(out_dir, {}, result.step, result.train_seconds, result.stopped_by,
                              result.best_step, setting)
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)  # the best one is the model
    # The step budget is the epochs: say so rather than "max_steps".
    stopped_by = "epochs" if result.stopped_by == "max_steps" else result.stopped_by
    baseline = final.get("baseline")
    return FinetuneResult(out_dir, final, result.step, result.train_seconds, stopped_by,
                          result.best_step, runner.task, baseline,
                          baseline_comparison(final, baseline, runner.task.selection),
                          dict(result.train_metrics))


__all__ = ["FinetuneConfig", "FinetuneResult", "finetune", "build_task_model", "freeze",
           "with_case_feature", "with_pooling",
           "param_groups", "EpochBatches"]
