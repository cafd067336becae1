"""Running a fine-tuned model: examples -> model inputs -> batched inference -> predictions.

`TaskModel.load(dir)` reads a directory written by `bertkit finetune` (or a transformers task
model); calling it predicts as its task does: `classify(texts)`, `tag(texts)` (entities with
character offsets in the original text, or one label per word for POS-style tags),
`answer(question, context)`. `evaluate(examples)` scores it on labelled examples. What each
step means for a task is the task's (bertkit.finetuning.task.Task); this module only batches.

Inference sorts inputs by token count and batches neighbours, so a batch pads to almost
nothing, and runs under `torch.inference_mode`.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from bertkit.files import UserError, atomic_file, check_not_input
from bertkit.finetuning.cnn import is_cnn_dir, load_cnn
from bertkit.finetuning.heads import load_task_weights
from bertkit.finetuning.inputs import Item, length_batches
from bertkit.finetuning.task import Task
from bertkit.finetuning.tasks import TASKS, load_task
from bertkit.model import hub
from bertkit.model.encoder import Encoder
from bertkit.text.tokenizer import Tokenizer


def run_model(model: torch.nn.Module, task: Task, items: Sequence[Item], batch_size: int,
              device: torch.device) -> list:
    """The task's raw outputs per item (`Task.infer`), in item order."""
    out: list = [None] * len(items)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for idx in length_batches([len(it.ids) for it in items], batch_size):
            chosen = [items[i] for i in idx]
            # inputs only: the targets of labelled examples are not needed here
            batch = task.collate([dataclasses.replace(it, target=None) for it in chosen])
            batch = {k: v.to(device) for k, v in batch.items()}
            for i, row in zip(idx, task.infer(model, batch, chosen)):
                out[i] = row
    model.train(was_training)
    return out


@dataclass
class TaskModel:
    """A fine-tuned model with its tokenizer and task, ready to predict."""
    model: torch.nn.Module
    tokenizer: object
    task: Task
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    batch_size: int = 64
    skip_no_room: bool = False
    """Skip (with a warning) inputs that cannot be encoded, such as QA questions that leave
    no room for the context, instead of refusing them."""

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu", batch_size: int = 64,
             task_types: Sequence[type[Task]] = TASKS) -> "TaskModel":
        """The model of a directory written by `bertkit finetune` or by transformers; its task
        is found by name among `task_types`. One written by `finetune --model cnn` holds the
        convolutional family's network (bertkit.finetuning.cnn)."""
        if is_cnn_dir(path):
            model, tokenizer, task = load_cnn(path, device)
            return cls(model, tokenizer, task, torch.device(device), batch_size)
        task = load_task(path, task_types)
        model = load_task_weights(task.make_model(Encoder(hub.load_config(path))), path, device)
        return cls(model, Tokenizer.load(path), task, torch.device(device), batch_size)

    def with_task(self, task: Task) -> "TaskModel":
        """The same model (shared, not copied) predicting with other task settings."""
        return dataclasses.replace(self, task=task)

    @property
    def labels(self) -> list[str]:
        return list(self.task.label_names())

    # Over read examples ------------------------------------------------------------------------
    def outputs(self, examples: Sequence) -> tuple[list[Item], list]:
        """The model inputs of `examples` and the model's raw outputs for them."""
        items = self.task.encode(self.tokenizer, examples, skip_no_room=self.skip_no_room)
        return items, run_model(self.model, self.task, items, self.batch_size, self.device)

    def predict(self, examples: Sequence) -> list:
        """One prediction per example, as the task decodes it."""
        items, outputs = self.outputs(examples)
        return self.task.decode_outputs(outputs, items, examples)

    def evaluate(self, examples: Sequence) -> dict:
        """The task's metrics on labelled examples (an unknown label names its line)."""
        self.task.check(examples)
        return self.task.score(examples, self.predict(examples))

    # The Python API ----------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """As the task answers: classify(texts), tag(texts) or answer(question, context)."""
        return self.task.pipeline(self, *args, **kwargs)

    def classify(self, texts: Sequence[str] | str, pairs: Sequence[str] | None = None):
        """[{"label", "score"}] per text (pipeline("text-classification") style); a number
        under "score" for regression, a list of labels for multi-label."""
        return self._call("classify", texts, pairs)

    def tag(self, texts: Sequence[str] | str):
        """Per text: entities [{"label", "text", "start", "end", "score"}] with character
        offsets into the text; for plain tags (POS), one {"word", "label", "start", "end"} per
        word."""
        return self._call("tag", texts)

    def answer(self, question: str | Sequence[str], context: str | Sequence[str]):
        """{"answer", "start", "end", "score"} (pipeline("question-answering") style); "" with
        start -1 when the model judges the question unanswerable."""
        return self._call("answer", question, context)

    def _call(self, verb: str, *args):
        if self.task.verb != verb:
            raise UserError(f"a {self.task.name} model cannot {verb}; call it as "
                            f"TaskModel.{self.task.verb}")
        return self.task.pipeline(self, *args)


def predict_file(runner: TaskModel, path: str | Path, out: str | Path | None = None) -> int:
    """Predict every input of a file; write one JSON object per input (to `out` atomically, or
    to stdout). Returns the number of predictions."""
    check_not_input(out, [path], what="output", names=["input"])
    rows = runner.task.prediction_rows(runner, path)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if out is None:
        sys.stdout.write(lines)
    else:
        with atomic_file(out) as f:
            f.write(lines)
    return len(rows)


# Module-level shortcuts -------------------------------------------------------------------------

def _model(model: "TaskModel | str | Path") -> TaskModel:
    return model if isinstance(model, TaskModel) else TaskModel.load(model)


def classify(model: "TaskModel | str | Path", texts, pairs=None):
    return _model(model).classify(texts, pairs)


def tag(model: "TaskModel | str | Path", texts):
    return _model(model).tag(texts)


def answer(model: "TaskModel | str | Path", question, context):
    return _model(model).answer(question, context)


__all__ = ["TaskModel", "run_model", "classify", "tag", "answer", "predict_file"]
