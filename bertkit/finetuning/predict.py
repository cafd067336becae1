"""Running a fine-tuned model: examples -> model inputs -> batched inference -> predictions.

`TaskModel.load(dir)` reads a directory written by `bertkit finetune` (or a transformers task
model); calling it predicts as its task does: `classify(texts)`, `tag(texts)` (entities with
character offsets in the original text, or one label per word for POS-style tags),
`answer(question, context)`. `evaluate(examples)` scores it on labelled examples. What each
step means for a task is the task's (bertkit.finetuning.task.Task); this module only batches.

Inference sorts inputs by token count and batches neighbours, so a batch pads to almost
nothing, and runs under `torch.inference_mode`.

`predict_file` writes one JSON object per input, one shape per task whatever the input format
(`PREDICTION_SHAPES`), or for a tagging model CoNLL: a word and its predicted tag per line
(word, gold tag, predicted tag when the input had tags), a blank line after each sentence.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from bertkit.config import EncoderConfig
from bertkit.files import UserError, atomic_file, check_not_input
from bertkit.finetuning.cnn import load_cnn
from bertkit.finetuning.heads import load_task_model
from bertkit.finetuning.inputs import (Item, check_fit, length_batches, pool_window_outputs,
                                      warn_cut, window_items)
from bertkit.finetuning.input_sources import STDIN, input_file, is_source
from bertkit.finetuning.task import Task
from bertkit.finetuning.tasks import TASKS, load_task
from bertkit.model import hub
from bertkit.model.kind import ModelKind, model_kind
from bertkit.progress import Progress
from bertkit.runtime import autocast, check_inference_precision, resolve_device
from bertkit.text.tokenizer import Tokenizer


def run_model(model: torch.nn.Module, task: Task, items: Sequence[Item], batch_size: int,
              device: torch.device, progress: str | None = None,
              precision: str = "fp32") -> list:
    """The task's raw outputs per item (`Task.infer`), in item order. `progress`: the name
    under which the run shows how far it is on stderr (bertkit.progress), None: silent.
    `precision`: "bf16" runs the model under autocast (the outputs come back in fp32)."""
    out: list = [None] * len(items)
    # Measured in tokens, as the embedder does: batches go longest first, so examples/s
    # would start slow. An example of several items (QA windows) counts a share per item.
    share = Counter(it.example for it in items)
    bar = Progress(progress or "", sum(len(it.ids) for it in items), "tokens",
                   counts={"examples": len(share)}, enabled=progress is not None)
    was_training = model.training
    model.eval()
    with torch.inference_mode(), autocast(device, precision):
        for idx in length_batches([len(it.ids) for it in items], batch_size):
            chosen = [items[i] for i in idx]
            # inputs only: the targets of labelled examples are not needed here
            batch = task.collate([dataclasses.replace(it, target=None) for it in chosen])
            batch = {k: v.to(device) for k, v in batch.items()}
            for i, row in zip(idx, task.infer(model, batch, chosen)):
                out[i] = row
            bar.update(add=sum(len(it.ids) for it in chosen),
                       examples=sum(1 / share[it.example] for it in chosen))
    model.train(was_training)
    bar.finish()
    return out


def fits_encoder(tokenizer, config: EncoderConfig, where) -> Callable[[Sequence[Item]], None]:
    """The check of inputs for a transformer of `config` (`inputs.check_fit`), naming `where`."""
    return lambda items: check_fit(items, tokenizer, config, where)


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
    report_cut: bool = True
    """Warn once per call how many inputs were longer than the task's max_length and were
    cut (fine-tuning's repeated dev evaluations turn it off and say it once)."""
    source: str = "the model"
    """The model's name (its directory) in messages."""
    check_inputs: Callable[[Sequence[Item]], None] | None = None
    """Refuses (UserError) inputs the model cannot run, before they run: `fits_encoder`'s
    check for a transformer; None: a network of its own vocabulary (`--model cnn`)."""
    progress: bool = False
    """Show how far a run of the model over the inputs is on stderr (bertkit.progress: a live
    bar on a terminal, a line every few seconds elsewhere), with examples/s."""
    windows: bool = False
    """Inputs longer than the task's max_length are run in windows and their outputs pooled
    as the task says (`Task.pool_windows`: classify, pair and regress average the windows'
    logits, tag and spans read each word from its most central window), instead of cut. A qa
    model windows its contexts whatever this says."""
    precision: str = "fp32"
    """fp32 (exact), or bf16: the model under bf16 autocast, about twice as fast on a CPU
    with AVX512-BF16 or AMX and on a GPU since Ampere (its outputs read back in fp32)."""
    ran: tuple[Sequence, torch.nn.Module, list[Item], list] | None = None
    """(examples, model, items, outputs): the outputs of `remembering`, which `outputs` returns
    for that list of examples while the model is that one."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {self.batch_size}")
        check_inference_precision(self.precision)
        if self.windows and self.task.reads_windows is False:
            raise UserError(f"--long-inputs windows: a {self.task.name} model reads no windows "
                            f"(classify, pair, regress, tag and spans models do); leave the "
                            f"inputs cut")

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu", batch_size: int = 64,
             task_types: Sequence[type[Task]] = TASKS, windows: bool = False,
             precision: str = "fp32") -> "TaskModel":
        """The model of a directory written by `bertkit finetune` or by transformers; its task
        is found by name among `task_types`. A model's name is looked up in the local Hugging
        Face cache. One written by `finetune --model cnn` holds the convolutional family's
        network (bertkit.finetuning.cnn). `windows`: long inputs read in windows, not cut.
        `precision`: fp32 or bf16 (`TaskModel.precision`)."""

        path = hub.resolve_model(path)
        if model_kind(path) is ModelKind.CNN:
            model, tokenizer, task = load_cnn(path, device, task_types)
            return cls(model, tokenizer, task, resolve_device(device), batch_size,
                       source=str(path), windows=windows, precision=precision)
        task, device = load_task(path, task_types), resolve_device(device)
        model = load_task_model(task, path, device)
        tokenizer = Tokenizer.load(path)
        return cls(model, tokenizer, task, device, batch_size, source=str(path),
                   check_inputs=fits_encoder(tokenizer, model.encoder.config, path),
                   windows=windows, precision=precision)

    def with_task(self, task: Task) -> "TaskModel":
        """The same model (shared, not copied) predicting with other task settings."""
        return dataclasses.replace(self, task=task)

    @property
    def labels(self) -> list[str]:
        return list(self.task.label_names())

    def remembering(self, examples: Sequence) -> "TaskModel":
        """The same model with its outputs over `examples` computed now and reused by every
        later call on that list (the same object), under this task or one its `tune` returns:
        tuning changes only how outputs are decoded, so tuning on dev and scoring it run the
        model once."""
        return dataclasses.replace(self, ran=(examples, self.model,
                                              *self.outputs(examples, "evaluate")))

    # Over read examples ------------------------------------------------------------------------
    def outputs(self, examples: Sequence, what: str = "predict") -> tuple[list[Item], list]:
        """The model inputs of `examples` and the model's raw outputs for them; `what` names
        the run in its progress."""
        if self.ran is not None and self.ran[0] is examples and self.ran[1] is self.model:
            return self.ran[2], self.ran[3]
        windowed = self.windows and self.task.reads_windows
        # Encoded whole (nothing is that long), then windowed to the task's max_length
        task = dataclasses.replace(self.task, max_length=1 << 30) if windowed else self.task
        items = task.encode(self.tokenizer, examples, skip_no_room=self.skip_no_room)
        if self.check_inputs is not None:
            self.check_inputs(items)
        if self.report_cut:
            warn_cut(items, len(examples), self.task.max_length)
        runs, splits = window_items(items, self.task.max_length) if windowed else (items, [])
        outputs = run_model(self.model, self.task, runs, self.batch_size, self.device,
                            what if self.progress else None, self.precision)
        return items, pool_window_outputs(outputs, items, splits, self.task.pool_windows) \
            if windowed else outputs

    def predict(self, examples: Sequence, what: str = "predict") -> list:
        """One prediction per example, as the task decodes it."""
        items, outputs = self.outputs(examples, what)
        return self.task.decode_outputs(outputs, items, examples)

    def evaluate(self, examples) -> dict:
        """The task's metrics on labelled examples (an unknown label names its line): examples
        already read, or a file, "-" (standard input), rows in memory (dicts as a JSONL file
        holds them) or a datasets.Dataset."""
        if is_source(examples):
            with input_file(examples) as path:
                examples = self.task.read(path)
        self.task.check(examples)
        return self.task.score(examples, self.predict(examples, "evaluate"))

    def predict_rows(self, source) -> list[dict]:
        """The rows `bertkit predict` writes (`PREDICTION_SHAPES`) for a file, "-", texts,
        rows in memory (dicts as a JSONL file holds them) or a datasets.Dataset."""
        with input_file(source) as path:
            return self.task.prediction_rows(self, path)

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


PREDICTION_SHAPES = {
    "classify": '{"text", "label", "score"}; multi-label: {"text", "labels", "scores": '
                '{label: probability}}; "pair" after "text" for pairs of texts',
    "pair": '{"text", "pair", "label", "score"}',
    "regress": '{"text", "score"} ("score" the predicted number; "pair" for pairs of texts)',
    "tag": '{"text", "tokens", "tags", "entities": [{"label", "text", "start", "end", '
           '"score"}]} plus "gold" for tagged input',
    "spans": 'as tag ("tags": the entities in BIO, the best-scored where they overlap)',
    "qa": '{"id", "answer", "start", "end", "score", "null_margin"}',
    "rerank": '{"query", "passage", "score"} per pair (a file of queries: per candidate)',
}
"""The row `bertkit predict` writes per input, by task (README, fine-tuning section)."""

FORMATS = ("jsonl", "conll")


def conll_lines(rows: Sequence[dict]) -> str:
    """Tagging rows as CoNLL: word TAB [gold TAB] predicted tag, a blank line after each
    sentence."""
    out = []
    for row in rows:
        gold = row.get("gold")
        for i, (word, tag) in enumerate(zip(row["tokens"], row["tags"])):
            out.append(f"{word}\t{gold[i]}\t{tag}\n" if gold else f"{word}\t{tag}\n")
        out.append("\n")
    return "".join(out)


def predict_file(runner: TaskModel, path, out: str | Path | None = None,
                 format: str = "jsonl") -> int:
    """Predict every input of a file (or "-", or rows in memory: `TaskModel.predict_rows`);
    write one JSON object per input (`PREDICTION_SHAPES`),
    or with format="conll" a tagging model's CoNLL (to `out` atomically, or to stdout).
    Returns the number of predictions."""
    if format not in FORMATS:
        raise UserError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if format == "conll" and runner.task.verb != "tag":
        raise UserError(f"--format conll writes tags: a {runner.task.name} model has none "
                        "(use jsonl)")
    if isinstance(path, (str, Path)) and str(path) != STDIN:
        check_not_input(out, [path], what="output", names=["input"])
    rows = runner.predict_rows(path)
    lines = conll_lines(rows) if format == "conll" else \
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
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


__all__ = ["TaskModel", "fits_encoder", "run_model", "classify", "tag", "answer", "predict_file",
           "PREDICTION_SHAPES", "FORMATS", "conll_lines"]
