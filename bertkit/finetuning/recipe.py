"""Fine-tuning: a pretrained encoder, a task head, labelled data, and the shared training loop.

    result = finetune("classify", model_dir, train_file, dev_file, out_dir, FinetuneConfig())

Tasks: classify (one text; single- or multi-label), pair (two texts through the same head),
regress (a number), tag (a label per word; optional CRF), qa (extractive, SQuAD 1.1 / 2.0),
spans (span-based NER, nested entities allowed). The result is a Hugging Face directory that
transformers loads as the matching Bert*For* model, plus bertkit_task.json (task, columns,
labels, scheme, thresholds) that `bertkit evaluate` / `predict` read.

Defaults follow what works for small BERTs: lr 5e-5 for the encoder and a larger one for the
freshly initialised head, 10% warm-up then linear decay, evaluation every epoch with early
stopping on the dev metric, the best checkpoint kept; 3 epochs at batch 32 for sentences,
10 epochs at batch 16 for tagging, where more, smaller steps pay.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from bertkit.finetuning import heads
from bertkit.model import hub
from bertkit.finetuning import metrics
from bertkit.finetuning import spans
from bertkit.config import TrainConfig
from bertkit.finetuning.crf import CRF, allowed_transitions
from bertkit.files import UserError, read_jsonl, read_lines, write_json
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.tagging import SCHEMES, convert_tags, detect_scheme, is_chunk_tag
from bertkit.finetuning.inputs import (Item, collate, encode_questions, encode_sentences, encode_texts,
                          length_batches)
from bertkit.finetuning.readers import (check_labels, check_tags, collect_labels, detect_format, read_squad,
                    read_tagged, read_text_examples, tagging_labels)

TASKS = ("classify", "pair", "regress", "tag", "qa", "spans")
# Per task: epochs, batch size, max length, head learning rate.
DEFAULTS = {
    "classify": (3, 32, 128, 1e-3), "pair": (3, 32, 128, 1e-3), "regress": (3, 32, 128, 1e-3),
    "tag": (10, 16, 128, 1e-3), "spans": (10, 16, 128, 1e-3), "qa": (3, 16, 384, 1e-3),
}
# The dev figure each task keeps its best checkpoint by.
MAIN_METRIC = {"classify": "accuracy", "pair": "accuracy", "regress": "pearson", "tag": "f1",
               "spans": "f1", "qa": "f1"}
TEXT_COLUMNS = ("text", "sentence", "premise", "sentence1", "question")
PAIR_COLUMNS = ("pair", "hypothesis", "sentence2", "text_b")
LABEL_COLUMNS = ("label", "labels", "score", "relatedness")


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
    crf: bool = False
    """tag: a linear-chain CRF over the labels, with the scheme's invalid transitions barred."""
    epochs: int | None = None
    """Passes over the training data; None = the task's default (DEFAULTS)."""
    lr: float = 5e-5
    """Peak learning rate of the encoder."""
    head_lr: float | None = None
    """Peak learning rate of the head (and CRF); None = the task's default."""
    batch_size: int | None = None
    """Examples per step; None = the task's default."""
    max_length: int | None = None
    """Longest input in tokens (longer ones are cut; QA contexts are windowed)."""
    train_layers: int | None = None
    """None trains everything; 0 freezes the encoder (head only); k trains the top k blocks."""
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
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32 or bf16 (autocast)."""
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
    device: str = "cpu"
    """Where the model trains: cpu, cuda, cuda:1, ..."""
    show_progress: bool = True
    """Progress lines on stderr."""


@dataclass
class FinetuneResult:
    out_dir: Path
    dev_metrics: dict
    """Scores of the saved model on dev (thresholds tuned)."""
    steps: int
    train_seconds: float
    stopped_by: str
    best_step: int | None
    task: dict = field(default_factory=dict)


# Data ---------------------------------------------------------------------------------------------

def _columns_of(path: Path) -> list[str]:
    fmt = detect_format(path)
    for number, line in read_lines(path):
        if not line.strip():
            continue
        if fmt == "jsonl":
            return list(next(read_jsonl(path))[1])
        return [c.strip().strip('"') for c in line.lstrip("\ufeff").split(
            "\t" if fmt == "tsv" else ",")]
    return []


def _pick(given: str | None, columns: list[str], candidates, path, what: str) -> str:
    if given is not None:
        return given
    for name in candidates:
        if name in columns:
            return name
    raise UserError(f"{path}:1: no {what} column among {', '.join(columns)}; name it with "
                    f"--{what}-column")


def describe_task(task: str, train_path: str | Path, cfg: FinetuneConfig) -> dict:
    """The task description (columns, format, sizes) before labels are known."""
    if task not in TASKS:
        raise UserError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    epochs, batch, max_length, head_lr = DEFAULTS[task]
    desc = {"task": task, "max_length": cfg.max_length or max_length}
    fmt = detect_format(train_path)
    if task in ("classify", "pair", "regress"):
        if fmt not in ("jsonl", "csv", "tsv"):
            raise UserError(f"{train_path}: {task} reads JSON lines, CSV or TSV, not {fmt}")
        columns = _columns_of(Path(train_path))
        desc["text_column"] = _pick(cfg.text_column, columns, TEXT_COLUMNS, train_path, "text")
        if task == "pair":
            desc["pair_column"] = _pick(cfg.pair_column, columns, PAIR_COLUMNS, train_path, "pair")
        else:  # a score may be of one text or of a pair (SICK relatedness)
            desc["pair_column"] = cfg.pair_column or (
                next((c for c in PAIR_COLUMNS if c in columns), None) if task == "regress"
                else None)
        desc["label_column"] = _pick(cfg.label_column, columns, LABEL_COLUMNS, train_path, "label")
        desc["label_kind"] = "float" if task == "regress" else \
            "multi" if cfg.multi_label else "single"
    elif task in ("tag", "spans"):
        desc.update(conllu_column=cfg.conllu_column, alignment=cfg.alignment)
        if cfg.scheme is not None and task == "tag":
            desc["scheme"] = cfg.scheme  # the data are re-tagged as they are read
        desc["decode"] = cfg.decode
        if cfg.decode not in ("first", "mean") or (cfg.decode == "mean" and cfg.crf):
            raise UserError(f"decode must be first or mean (mean not with --crf), got "
                            f"{cfg.decode!r}")
        if cfg.alignment not in ("copy", "first"):
            raise UserError(f"alignment must be copy or first, got {cfg.alignment!r}")
        if cfg.scheme is not None and cfg.scheme not in SCHEMES:
            raise UserError(f"scheme must be one of {', '.join(SCHEMES)}, got {cfg.scheme!r}")
    else:
        desc.update(stride=cfg.stride, max_answer_tokens=cfg.max_answer_tokens, max_question=64)
    return desc


def read_examples(task: dict, path: str | Path) -> list:
    """Labelled (or unlabelled, for prediction) examples of a task from a file."""
    name = task["task"]
    if name in ("classify", "pair", "regress"):
        return read_text_examples(path, text_column=task["text_column"],
                                  pair_column=task.get("pair_column"),
                                  label_column=task.get("label_column"),
                                  label_kind=task.get("label_kind", "single"))
    if name == "qa":
        return read_squad(path)
    if name == "spans" and detect_format(path) == "jsonl":
        return spans.read_span_jsonl(path)
    sentences = read_tagged(path, task.get("conllu_column", "upos"))
    if task.get("scheme") and name == "tag":
        for s in sentences:
            s.tags = convert_tags(s.tags, task["scheme"])
    return sentences


def _split(examples: list, fraction: float, seed: int, by=None) -> tuple[list, list]:
    """Hold out `fraction` of the examples (whole groups when `by` names each one's group)."""
    keys = [by(ex) for ex in examples] if by else list(range(len(examples)))
    groups = sorted(set(keys))
    if len(groups) < 2:
        raise UserError("too few examples (or articles) to hold out a dev set; pass --dev")
    order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(seed)).tolist()
    held = {groups[i] for i in order[:max(1, round(fraction * len(groups)))]}
    return ([ex for ex, k in zip(examples, keys) if k not in held],
            [ex for ex, k in zip(examples, keys) if k in held])


def _labels(task: dict, train: list, dev: list, scheme: str | None) -> None:
    name = task["task"]
    if name in ("classify", "pair"):
        task["labels"] = collect_labels(train)
        if len(task["labels"]) < 2:
            raise UserError(f"{train[0].source.rsplit(':', 1)[0]}: only one label "
                            f"({task['labels'][0]}) in the training data")
        check_labels(dev, task["labels"])
    elif name == "tag":
        task["labels"] = tagging_labels(train, scheme)
        task["scheme"] = scheme or detect_scheme(task["labels"])
        check_tags(dev, task["labels"])
    elif name == "spans":
        task["labels"] = sorted({t for s in train for _, _, t in spans.gold_spans(s)})
        if not task["labels"]:
            raise UserError("the training data has no entities")
        unknown = [(s.source, t) for s in dev for _, _, t in spans.gold_spans(s)
                   if t not in task["labels"]]
        if unknown:
            raise UserError(f"{unknown[0][0]}: unknown entity type {unknown[0][1]!r} (the "
                            f"training types are: {', '.join(task['labels'])})")
        task["nested"] = any(a2 < b1 and a1 < b2 for s in train
                             for i, (a1, b1, _) in enumerate(spans.gold_spans(s))
                             for a2, b2, _ in spans.gold_spans(s)[i + 1:])


def encode(tokenizer, task: dict, examples: list, training: bool) -> list[Item]:
    name = task["task"]
    if name in ("classify", "pair", "regress"):
        return encode_texts(tokenizer, examples, task)
    if name == "qa":
        return encode_questions(tokenizer, examples, task, training=training)[0]
    return encode_sentences(tokenizer, examples, task)


class EpochBatches:
    """Length-bucketed, shuffled batches, a new order each epoch; resumable."""

    def __init__(self, items: list[Item], task: dict, batch_size: int, seed: int):
        self.items, self.task, self.batch_size, self.seed = items, task, batch_size, seed
        self.lengths = [len(it.ids) for it in items]
        self.epoch, self.served = 0, 0

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        order = length_batches(self.lengths, self.batch_size, g)
        skip, self.served = self.served, 0
        for idx in order[skip:]:
            self.served += 1
            yield collate([self.items[i] for i in idx], self.task)
        self.epoch, self.served = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "served": self.served}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.served = state["epoch"], state["served"]


# Model ----------------------------------------------------------------------------------------------

def build(task: dict, model_dir: str | Path, cfg: FinetuneConfig) -> nn.Module:
    encoder = hub.load_encoder(model_dir)
    name = task["task"]
    if name in ("classify", "pair", "regress"):
        problem = {"float": "regression", "multi": "multi_label_classification"}.get(
            task["label_kind"], "single_label_classification")
        model = heads.SequenceClassifier(encoder, 1 if name == "regress" else len(task["labels"]),
                                         problem)
    elif name == "tag":
        crf = CRF(len(task["labels"]), allowed_transitions(task["labels"], task["scheme"])) \
            if cfg.crf else None
        model = heads.TokenClassifier(encoder, len(task["labels"]), crf)
    elif name == "qa":
        model = heads.QuestionAnswerer(encoder)
    else:
        model = heads.SpanTagger(encoder, len(task["labels"]), cfg.max_span_width, cfg.span_ffn)
    with torch.random.fork_rng():  # seeded head initialisation, global generator untouched
        torch.manual_seed(cfg.seed)
        heads.init_head(model)
    freeze(model, cfg.train_layers)
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
        enc.pooler.requires_grad_(True)


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


def loss_fn(model: nn.Module, batch: dict, null_weight: float = 1.0):
    inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    if isinstance(model, heads.SequenceClassifier):
        return model.loss(model(*inputs), batch["labels"]), {}
    if isinstance(model, heads.TokenClassifier):
        return model.loss(model(*inputs), batch["labels"]), {}
    if isinstance(model, heads.QuestionAnswerer):
        return model.loss(model(*inputs), batch["start_positions"], batch["end_positions"]), {}
    logits, mask = model(*inputs, word_ids=batch["word_ids"])
    return spans.span_loss(logits, batch["span_target"], mask, null_weight), {}


# Thresholds ---------------------------------------------------------------------------------------

def tune_thresholds(runner: TaskModel, dev: list) -> dict:
    """SQuAD 2.0 null threshold or span-NER NULL margin that maximise dev F1."""
    task = runner.task
    if task["task"] == "qa" and any(ex.is_impossible for ex in dev):
        task.pop("null_threshold", None)
        scores = runner.evaluate(dev)
        task["null_threshold"] = scores["best_f1_thresh"]
        if runner.evaluate(dev)["f1"] < scores["best_f1"] - 1e-9:
            # The best is to answer nothing: the search reports that as threshold 0.
            task["null_threshold"] = -1e9
    elif task["task"] == "spans":
        rows = runner.span_rows(dev)  # the model runs once; each margin only decodes
        gold = [spans.gold_spans(s) for s in dev]
        best = (-1.0, 0.0)
        for margin in (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0):
            found = runner.decode_span_rows(rows, margin)
            f1 = metrics.span_scores(gold, [[(a, b, t) for a, b, t, _ in f] for f in found])["f1"]
            best = max(best, (f1, -margin))
        task["span_margin"] = -best[1]
    return task


# The pipeline ---------------------------------------------------------------------------------------

def finetune(task_name: str, model_dir: str | Path, train_path: str | Path,
             dev_path: str | Path | None, out_dir: str | Path,
             cfg: FinetuneConfig | None = None) -> FinetuneResult:
    """Train a task head (and the encoder) on `train_path`, keep the best dev checkpoint, and
    write it to `out_dir` as a Hugging Face directory with bertkit_task.json."""
    from bertkit.text.tokenizer import Tokenizer
    from bertkit.training.loop import train

    cfg = cfg or FinetuneConfig()
    out_dir = Path(out_dir)
    task = describe_task(task_name, train_path, cfg)
    epochs, batch_size, _, head_lr = DEFAULTS[task_name]
    epochs, batch_size = cfg.epochs or epochs, cfg.batch_size or batch_size
    head_lr = cfg.head_lr or head_lr
    tokenizer = Tokenizer.load(model_dir)
    enc_cfg = hub.load_config(model_dir)
    if cfg.max_length is None:  # the task's default, within what the model takes
        task["max_length"] = min(task["max_length"], enc_cfg.max_positions)
    if task["max_length"] > enc_cfg.max_positions:
        raise UserError(f"--max-length {task['max_length']} is longer than the model's "
                        f"{enc_cfg.max_positions} positions")

    train_examples = read_examples(task, train_path)
    if dev_path is None:
        by = None
        if task_name == "qa":  # whole articles, or whole paragraphs of a single article
            by = (lambda ex: ex.title) if len({ex.title for ex in train_examples}) > 1 \
                else (lambda ex: ex.context)
        train_examples, dev = _split(train_examples, cfg.dev_fraction, cfg.seed, by)
    else:
        dev = read_examples(task, dev_path)
    _labels(task, train_examples, dev, cfg.scheme)
    model = build(task, model_dir, cfg)
    task["head"] = model.head_spec()
    items = encode(tokenizer, task, train_examples, training=True)
    if not items:
        raise UserError(f"{train_path}: nothing to train on")
    batches = EpochBatches(items, task, batch_size, cfg.seed)
    steps_per_epoch = len(batches)
    metric = MAIN_METRIC[task_name]
    if task_name == "qa" and any(ex.is_impossible for ex in dev):
        metric = "best_f1"
    if task_name == "tag" and not any(is_chunk_tag(t) and t != "O" for t in task["labels"]):
        metric = "accuracy"  # POS-style labels: no entities to score
    runner = TaskModel(model, tokenizer, task, torch.device(cfg.device), skip_no_room=True)

    def evaluate(m: nn.Module) -> dict:
        scores = runner.evaluate(dev)
        out = {f"dev_{k}": float(v) for k, v in scores.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if metric == "best_f1":
            # For many evaluations answering nothing is the best threshold: best F1 sits at the
            # "no answer" rate, moved only by a lucky answer or two, while the spans improve.
            # Models are chosen by best F1 and the span quality (HasAns F1) alike.
            out["dev_selection"] = (out["dev_best_f1"] + out.get("dev_has_ans_f1", 0.0)) / 2
        return out

    final: dict = {}

    def save(m: nn.Module, path: Path) -> None:
        tune_thresholds(runner, dev)
        final.update(runner.evaluate(dev))
        if task_name != "spans" or all(getattr(s, "tags", None) for s in train_examples):
            final["baseline"] = metrics.baseline_scores(task, train_examples, dev)
        heads.save_task_model(m, path, task=task, tokenizer=tokenizer,
                              labels=task.get("labels") if task_name != "regress" else None)
        write_json(path / "dev_metrics.json", final)

    eval_every = max(1, steps_per_epoch // max(1, cfg.evals_per_epoch))
    # A time budget without --epochs: the schedule follows the clock, as long as it lasts.
    max_steps = None if cfg.max_time and not cfg.epochs else epochs * steps_per_epoch
    train_cfg = TrainConfig(
        lr=cfg.lr, max_steps=max_steps, max_time=cfg.max_time,
        warmup_fraction=cfg.warmup, weight_decay=cfg.weight_decay, eps=1e-8,
        precision=cfg.precision, seed=cfg.seed, log_every=max(1, min(50, eval_every // 4)),
        eval_every=eval_every, best_mode="max",
        best_metric="dev_selection" if metric == "best_f1" else f"dev_{metric}",
        patience=cfg.patience, restore_best=True)
    fingerprint = {"task": task_name, "train": str(train_path), "config": dataclasses.asdict(cfg)}
    objective = functools.partial(loss_fn, null_weight=cfg.span_null_weight)
    result = train(model, objective, batches, train_cfg, out_dir, evaluate=evaluate,
                   param_groups=param_groups(model, cfg.lr, head_lr, cfg.weight_decay),
                   save=save, fingerprint=json.loads(json.dumps(fingerprint, default=str)),
                   device=cfg.device, show_progress=cfg.show_progress)
    if result.stopped_by == "interrupted":
        raise UserError(f"{out_dir}: interrupted at step {result.step}; no model was saved")
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)  # the best one is the model
    return FinetuneResult(out_dir, final, result.step, result.train_seconds, result.stopped_by,
                          result.best_step, task)


__all__ = ["FinetuneConfig", "FinetuneResult", "finetune", "read_examples", "describe_task",
           "build", "freeze", "param_groups", "loss_fn", "EpochBatches",
           "tune_thresholds", "TASKS", "DEFAULTS"]
