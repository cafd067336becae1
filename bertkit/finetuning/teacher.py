"""A fine-tuned teacher of the task a student is fine-tuned for (`finetune TASK --teacher`).

    teacher = Teacher.load(Distillation(teacher="out/big"), Classify())   # checked, loaded
    backbone = teacher.student(3)          # a student of 3 of its layers, or of another
                                           # encoder: teacher.student_of(model_dir)
    finetune(task, teacher.path, train, dev, out, cfg, backbone=backbone, teacher=teacher)

What the recipe (`bertkit.finetuning.recipe`) asks of it:

    lesson    the student's task with the teacher's label order (their outputs line up),
              and the transfer set's unlabelled texts read: bad input said before training
    teach     the training items with the teacher's outputs (`Taught`), computed once in
              inference mode (`bertkit.finetuning.distillation` says why), and the loss

The teacher reads the examples with its own tokenizer: where it is the student's, its items
are the student's; where it differs, a task with one item per example (classify, pair,
regress) maps them by example, and a task of per-token outputs is refused.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from bertkit.files import UserError
from bertkit.finetuning import distillation as dist
from bertkit.finetuning.backbone import Encoder, freeze
from bertkit.finetuning.heads import init_head, load_task_model, task_model
from bertkit.finetuning.inputs import Item, length_batches
from bertkit.finetuning.predict import TaskModel, fits_encoder
from bertkit.finetuning.task import Task, model_inputs
from bertkit.finetuning.tasks import load_task
from bertkit.model import hub
from bertkit.model.encoder import Encoder as EncoderModule
from bertkit.model.kind import ModelKind, model_kind
from bertkit.progress import Progress
from bertkit.text.tokenizer import Tokenizer


@dataclass
class TaughtItem(Item):
    """A training item with the teacher's outputs for it."""
    taught: object = None


@dataclass(frozen=True)
class Lesson:
    """What a teacher teaches a student's task: the task with the teacher's labels, and the
    unlabelled examples of the transfer set."""
    task: Task
    unlabeled: list


class Teacher:
    """A fine-tuned model of the student's task, and the distillation settings."""

    def __init__(self, settings: dist.Distillation, path: Path, task: Task):
        self.settings, self.path, self.task = settings, path, task
        self.config = hub.load_config(path)
        self.runner: TaskModel | None = None

    @classmethod
    def load(cls, settings: dist.Distillation, task: Task) -> "Teacher":
        """The teacher of `settings` for `task`, checked (cheaply: before any data is read)
        to be a fine-tuned model of the same task, deep enough for --student-layers."""
        path = hub.resolve_model(settings.teacher)
        kind = model_kind(path)
        found = task.sentence_teacher(path) if kind is ModelKind.ENCODER else None
        if found is None and kind is not ModelKind.TASK:
            raise UserError(f"{path}: {kind.value}, not a fine-tuned {task.name} model "
                            f"(--teacher)")
        found = found or load_task(path)
        if found.name != task.name:
            raise UserError(f"{path}: a fine-tuned {found.name} model, not a {task.name} one "
                            f"(--teacher)")
        teacher = cls(settings, path, found)
        if settings.student_layers is not None:
            dist.student_layers(teacher.config.num_layers, settings.student_layers)
        return teacher

    def options(self) -> dict:
        return self.settings.options()

    def student(self, train_layers: int | None = None,
                layer_mix: bool = False) -> "StudentEncoder":
        """The backbone of a student of --student-layers of the teacher's layers."""
        return StudentEncoder(self, self.settings.student_layers, train_layers, layer_mix)

    def student_of(self, model_dir: str | Path, train_layers: int | None = None,
                   layer_mix: bool = False) -> Encoder:
        """The backbone of a student that is the encoder of `model_dir` (--model): one with a
        learned projection to the teacher's width where its own differs."""
        plain = Encoder(model_dir, train_layers, layer_mix)
        if plain.width == self.config.hidden_size:
            return plain
        return ProjectedEncoder(model_dir, self.config.hidden_size, train_layers, layer_mix)

    # The recipe's steps ---------------------------------------------------------------------------
    def lesson(self, task: Task) -> Lesson:
        """The student's task with the teacher's label order (a label the teacher does not
        know is refused), and the unlabelled texts read."""
        mine, theirs = task.label_names(), self.task.label_names()
        if unknown := [name for name in mine if name not in theirs]:
            raise UserError(f"label {unknown[0]!r} of the training data is not one of the "
                            f"teacher's ({', '.join(theirs)})")
        if mine:
            task = dataclasses.replace(task, labels=tuple(theirs))
        unlabeled = [] if self.settings.unlabeled is None else \
            task.unlabelled(self.settings.unlabeled, Tokenizer.load(self.path))
        if self.settings.unlabeled is not None and not unlabeled:
            raise UserError(f"{self.settings.unlabeled}: no texts")
        return Lesson(task, unlabeled)

    def teach(self, lesson: Lesson, backbone, items: list[Item], examples: Sequence,
              device: str, show_progress: bool = True) -> "Taught":
        """The training items and those of the unlabelled texts, each with the teacher's
        outputs, computed now (the student's `backbone` encoded `items` from `examples`)."""
        task, tokenizer = lesson.task, backbone.tokenizer
        more = task.encode(tokenizer, lesson.unlabeled, training=True, skip_no_room=True)
        more = [dataclasses.replace(it, example=it.example + len(examples), target=None)
                for it in more]
        runner = self._runner(device)
        every = [*examples, *lesson.unlabeled]
        own = task.encode(runner.tokenizer, every, training=True, skip_no_room=True)
        student = items + more
        aligned = [it.ids for it in own] == [it.ids for it in student]
        if not aligned and not (_one_each(own, every) and _one_each(student, every)):
            raise UserError(f"the teacher's tokenizer differs from the student's: {task.name} "
                            f"learns outputs per token, which needs the same tokenizer")
        if self.settings.hidden_weight and not aligned:
            raise UserError("--hidden-weight compares the teacher's and the student's hidden "
                            "states token by token, which needs the same tokenizer")
        outputs = self._outputs(runner, student if aligned else own, show_progress)
        if not aligned:  # one output per example, by example
            by_example = {it.example: out for it, out in zip(own, outputs)}
            outputs = [by_example[it.example] for it in student]
        taught = [TaughtItem(**{f.name: getattr(it, f.name) for f in dataclasses.fields(Item)},
                             taught=out) for it, out in zip(student, outputs)]
        beside = runner.model if self.settings.hidden_weight else None
        self.runner = None  # its outputs are kept: only the hidden-state loss needs it later
        return Taught(task, taught, self.settings, beside, self.layer_map(),
                      isinstance(backbone, ProjectedEncoder))

    def layer_map(self) -> list[int]:
        """The teacher's layer each student layer maps to (for the hidden-state loss)."""
        n = self.settings.student_layers
        return dist.student_layers(self.config.num_layers, n) if n else []

    def whole(self) -> torch.nn.Module:
        """The teacher's model, its task's head on its encoder, in eval mode on the CPU."""
        if model_kind(self.path) is ModelKind.TASK:
            return load_task_model(self.task, self.path)
        return self.task.make_model(hub.load_encoder(self.path)).eval()  # a sentence encoder

    def _runner(self, device: str) -> TaskModel:
        if self.runner is None:
            tokenizer = Tokenizer.load(self.path)
            self.runner = TaskModel(self.whole().to(device), tokenizer, self.task,
                                    torch.device(device), source=str(self.path),
                                    check_inputs=fits_encoder(tokenizer, self.config, self.path))
        return self.runner

    def _outputs(self, runner: TaskModel, items: list[Item], show_progress: bool) -> list:
        """The teacher's outputs per item (`Task.teacher_outputs`), in inference mode."""
        out: list = [None] * len(items)
        progress = Progress("teacher", len(items), "items", enabled=show_progress)
        model, task = runner.model.eval(), self.task
        with torch.inference_mode():
            for idx in length_batches([len(it.ids) for it in items], runner.batch_size):
                # no targets: the teacher's pass needs none, and a batch may mix (unlabelled)
                chunk = [dataclasses.replace(items[i], target=None) for i in idx]
                batch = {k: v.to(runner.device) if isinstance(v, torch.Tensor) else v
                         for k, v in task.collate(chunk).items()}
                for i, o in zip(idx, task.teacher_outputs(model, batch, chunk)):
                    out[i] = o
                progress.update(add=len(idx))
        progress.finish()
        return out


def teaches(task_type: type[Task]) -> bool:
    """Whether tasks of this class learn from a teacher's outputs (`Task.taught_loss`)."""
    return task_type.taught_loss is not Task.taught_loss


def _one_each(items: Sequence[Item], examples: Sequence) -> bool:
    """Whether `items` hold one item per example, in order (a task of one output each)."""
    return [it.example for it in items] == list(range(len(examples)))


class Taught:
    """The loop's batches and loss when a teacher teaches: `EpochBatches` takes it for the
    task (its `batch_order` and `training_batch`), `train` its `loss`."""

    def __init__(self, task: Task, items: list[TaughtItem], settings: dist.Distillation,
                 teacher_model: torch.nn.Module | None, layers: list[int],
                 projected: bool = False):
        self.task, self.items, self.settings = task, items, settings
        self.teacher_model, self.layers = teacher_model, layers
        self.projected = projected
        """Whether the student has a `teacher_projection` (`ProjectedEncoder`)."""

    def batch_order(self, items, batch_size: int, generator: torch.Generator) -> list[list[int]]:
        """The task's order over the labelled items and, apart, the unlabelled ones (a batch
        is all of one or the other: the labels' loss needs every row's label), shuffled
        together."""
        labelled = [i for i, it in enumerate(items) if it.target is not None]
        unlabelled = [i for i, it in enumerate(items) if it.target is None]
        batches = [[part[i] for i in b] for part in (labelled, unlabelled) if part
                   for b in self.task.batch_order([items[i] for i in part], batch_size,
                                                  generator)]
        return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]

    def collate(self, items: Sequence[TaughtItem]) -> dict:
        return self._with_teacher(self.task.collate(items), items)

    def training_batch(self, items: Sequence[TaughtItem], generator: torch.Generator,
                       share: Sequence[int] | None = None) -> dict:
        rows = items if share is None else [items[i] for i in share]
        return self._with_teacher(self.task.training_batch(items, generator, share), rows)

    @staticmethod
    def _with_teacher(batch: dict, items: Sequence[TaughtItem]) -> dict:
        batch["teacher"] = dist.stack_outputs([it.taught for it in items])
        return batch

    def target_count(self, batch: dict) -> float:
        """The task's count (`Task.target_count`): its loss's targets where labels teach too."""
        return self.task.target_count(batch)

    def loss(self, model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        project = model.teacher_projection if self.projected else None
        taught = self.task.taught_loss(model, batch, self.settings, project)
        if not self.settings.hidden_weight:
            return taught, {}
        hidden = self.hidden_loss(model, batch, project)
        return taught + self.settings.hidden_weight * hidden, {"hidden_loss": hidden.detach()}

    def hidden_loss(self, model: torch.nn.Module, batch: dict, project=None) -> torch.Tensor:
        """MSE of the student's hidden states (projected to the teacher's width where it
        differs) to those of the teacher's layers they map to."""
        inputs = model_inputs(batch)
        with torch.no_grad():
            theirs = self.teacher_model.encoder(*inputs, output_hidden_states=True).hidden_states
        mine = model.encoder(*inputs, output_hidden_states=True).hidden_states
        mine = tuple(project(h) for h in mine) if project is not None else mine
        layers = self.layers or dist.student_layers(len(theirs) - 1, len(mine) - 1)
        return dist.hidden_mse(mine, theirs, layers, batch["attention_mask"] > 0)


class StudentEncoder(Encoder):
    """A backbone of N of a teacher's layers, evenly spaced with the first and the last kept,
    its embeddings, head and tokenizer the teacher's (DistilBERT's initialisation)."""

    def __init__(self, teacher: Teacher, layers: int, train_layers: int | None = None,
                 layer_mix: bool = False):
        super().__init__(teacher.path, train_layers, layer_mix)
        self.teacher, self.layers = teacher, dist.student_layers(teacher.config.num_layers,
                                                                 layers)
        self.config = dataclasses.replace(self.config, num_layers=layers)
        self.block_weights = self.config.block_weights

    def build(self, task: Task, seed: int) -> torch.nn.Module:
        whole = self.teacher.whole()
        student = task_model(task, EncoderModule(self.config), self.layer_mix)
        init_head(student, torch.Generator().manual_seed(seed))  # what the teacher lacks
        state = copy_layers(whole.state_dict(), self.layers)
        # a mix weighs its own model's layers: the student's starts afresh
        state = {k: v for k, v in state.items() if not k.startswith("layer_mix.")}
        mismatch = [k for k, v in student.state_dict().items() if not k.startswith("layer_mix.")
                    and (k not in state or state[k].shape != v.shape)]
        if mismatch:
            raise UserError(f"{self.teacher.path}: the teacher's head differs from the "
                            f"student's ({mismatch[0]}): give the teacher's task settings")
        student.load_state_dict(state, strict=False)
        freeze(student, self.train_layers)
        return student.train()


class ProjectedEncoder(Encoder):
    """A student encoder narrower or wider than its teacher: its model has a learned linear
    map of its hidden states and vectors to the teacher's width, `teacher_projection`, for
    the losses that compare them (TinyBERT's W_h, Jiao et al. 2020). Trained and kept in
    checkpoints with the model, left out of the saved student."""

    def __init__(self, model_dir: str | Path, teacher_width: int,
                 train_layers: int | None = None, layer_mix: bool = False):
        super().__init__(model_dir, train_layers, layer_mix)
        self.teacher_width = teacher_width

    def build(self, task: Task, seed: int) -> torch.nn.Module:
        model = super().build(task, seed)
        projection = torch.nn.Linear(self.width, self.teacher_width)
        g = torch.Generator().manual_seed(seed + 1)  # not the head's draws
        with torch.no_grad():
            projection.weight.normal_(0.0, self.width ** -0.5, generator=g)
            projection.bias.zero_()
        model.add_module("teacher_projection", projection)
        return model

    def save(self, model: torch.nn.Module, path: Path, **kwargs) -> Path:
        projection = model._modules.pop("teacher_projection")  # no part of the student
        try:
            return super().save(model, path, **kwargs)
        finally:
            model.add_module("teacher_projection", projection)


def copy_layers(state: dict, layers: list[int]) -> dict:
    """A teacher's state dict with its encoder blocks `layers` renumbered 0, 1, ... and the
    other blocks left out; everything else (embeddings, head) as it is."""
    prefix, new = "encoder.blocks.", {}
    index = {k: i for i, k in enumerate(layers)}
    for name, value in state.items():
        if name.startswith(prefix):
            block, rest = name[len(prefix):].split(".", 1)
            if int(block) not in index:
                continue
            name = f"{prefix}{index[int(block)]}.{rest}"
        new[name] = value.clone()
    return new


__all__ = ["Teacher", "teaches", "Taught", "TaughtItem", "Lesson", "StudentEncoder",
           "ProjectedEncoder", "copy_layers"]
