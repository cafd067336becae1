"""The protocol every fine-tuning task implements, and what the tasks share.

A task is a frozen dataclass: its fields are the settings saved in bertkit_task.json (labels,
columns, scheme, thresholds, ...) and its methods are the steps of fine-tuning and prediction.
The fields a user sets (`task_settings`: all but those marked `fitted`) are also the flags of
`bertkit finetune TASK`, generated from the class; a new task with a new setting is one module
and its line in `bertkit.finetuning.tasks.TASKS`.

    configure  the settings made concrete for a training file (columns picked, checks)
    for_backbone  what depends on the model: pooling, the word-case feature
    read       labelled examples from a file;  read_inputs: what `bertkit predict` reads
    with_labels  the label set collected from training (checked against dev); check: on test
    encode     examples -> model inputs (`Item`s);  collate: items -> a padded batch
    training_batch  collate's batch, with what a task draws per training batch; under
                 torchrun, a rank's share of it
    step_inputs  the inputs a training step runs through the model at once (its memory)
    batch_order  one epoch's batches of items (length-bucketed; a bi-encoder's: no text twice)
    make_model the encoder with the task's head;  loss: one batch's loss
    load_pretrained  what of the model directory the task starts from beside the encoder
    with_steps the settings given the run's length in steps (a loss scheduled over the run)
    target_count  how many targets a batch's loss averages over (ranks' weights)
    infer      one batch's raw outputs;  decode_outputs: outputs -> predictions
    score      metrics of predictions against labelled examples;  baseline: a trivial one's
    selection  the dev figure the best checkpoint is kept by;  tune: thresholds fitted on dev
    pipeline   what calling a TaskModel does (pipeline-style dicts)
    save_model the trained model written (the backbone's format; a sentence model's own)
    usage      how the saved model is run, as its card shows it

The recipe, prediction and saving call these and never ask which task they hold. Tuning and
overrides return a new value (`dataclasses.replace`); nothing changes a task in place. The
tasks themselves are listed once, in `bertkit.finetuning.tasks.TASKS`.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Collection, Protocol, Sequence

import torch
from torch import nn

from bertkit.files import UserError, compression_of, format_suffix, read_jsonl, read_lines
from bertkit.finetuning.inputs import Item, length_batches, pad_inputs
from bertkit.finetuning.readers import TEXT_COLUMNS, detect_format
from bertkit.text.sources import Source, csv_rows, find_delimiter
from bertkit.text.windows import Windows


class Runner(Protocol):
    """What a task asks of the model that runs it (`bertkit.finetuning.predict.TaskModel`):
    declared here, so that the tasks need not import the runner that imports them."""
    tokenizer: Any
    task: "Task"

    def with_task(self, task: "Task") -> "Runner": ...

    def outputs(self, examples: Sequence, what: str = "predict") -> tuple[list[Item], list]: ...

    def predict(self, examples: Sequence) -> list: ...

    def classify(self, texts, pairs=None): ...

    def answer(self, question, context): ...


class ModelFacts(Protocol):
    """What a task's settings may depend on in the model it is trained from (a backbone,
    `bertkit.finetuning.backbone.Backbone`)."""
    architecture: str | None
    """A transformer encoder's ("bert", "modern"); None for another family (the CNN)."""
    lowercases: bool
    """Whether its tokenizer lowercases (and so loses the capitals that mark names)."""
    width: int | None
    """A transformer encoder's hidden size, the width of its vectors; None for another
    family."""


def fitted(default: Any = None) -> Any:
    """A task field that fine-tuning fills in (labels, thresholds): saved, never a flag."""
    return dataclasses.field(default=default, metadata={"flag": False})


def setting_fields(task: "Task | type[Task]") -> dict[str, str]:
    """The settings a user gives a task: their names (the flag's, which
    `field(metadata={"flag": NAME})` makes other than the field's) -> the field's name."""
    return {f.metadata.get("flag", f.name): f.name for f in dataclasses.fields(task)
            if f.metadata.get("flag") is not False}


def task_settings(task: "Task | type[Task]") -> dict[str, Any]:
    """The settings of a task (a class: its defaults) by their names, as the command line and
    training_args.json spell them."""
    defaults = {f.name: f.default for f in dataclasses.fields(task)}
    return {name: defaults[field] if isinstance(task, type) else getattr(task, field)
            for name, field in setting_fields(task).items()}


# Below this many block weights (EncoderConfig.block_weights: the tiny and mini presets, about
# 3M; MiniLM-L6 has 10.6M, BERT-base 85M) a model takes `Defaults.small_model_epochs`.
SMALL_MODEL_WEIGHTS = 5_000_000


@dataclass(frozen=True)
class Defaults:
    """A task's training defaults, used where FinetuneConfig leaves a value None."""
    epochs: int
    batch_size: int
    max_length: int
    head_lr: float = 1e-3
    lr: float = 5e-5
    """Peak learning rate of the encoder (BERT's fine-tuning range is 2e-5 to 5e-5)."""
    small_model_lr: float | None = 2e-4
    """The encoder's rate under SMALL_MODEL_WEIGHTS block weights; None: `lr`. With the
    60-minute `mini` of docs/recipe.md, three seeds each, 2e-4 gave every task more than
    5e-5: POS 0.920 against 0.898, SICK 0.698 against 0.669, movie reviews above on every
    seed, SICK relatedness Pearson 0.685 against 0.530, WNUT-16 by the span head F1 0.279
    against 0.246. QA sets None: the same model learned no usable spans at either rate."""
    small_model_epochs: int | None = None
    """Epochs for an encoder under SMALL_MODEL_WEIGHTS block weights; None: `epochs`. A model
    of a few million weights is still fitting a sentence task when 3 epochs end (the 60-minute
    `mini` of docs/recipe.md: SICK 0.618 after 3 epochs, 0.669 given 10 with early
    stopping), while larger ones have peaked by then."""

    def epochs_for(self, block_weights: int | None) -> int:
        """The default epochs for an encoder of `block_weights` (None: not a bertkit encoder,
        e.g. the CNN backbone)."""
        return self.small_model_epochs if _small(block_weights) and self.small_model_epochs \
            else self.epochs

    def lr_for(self, block_weights: int | None) -> float:
        """The encoder's default peak learning rate for an encoder of `block_weights`."""
        return self.small_model_lr if _small(block_weights) and self.small_model_lr \
            else self.lr


def _small(block_weights: int | None) -> bool:
    return block_weights is not None and block_weights < SMALL_MODEL_WEIGHTS


@dataclass(frozen=True)
class Task:
    """Base of the fine-tuning tasks; subclasses are frozen dataclasses adding their settings.

    Methods that every task must write raise NotImplementedError here; the rest have the
    defaults most tasks want (no labels to collect, no baseline, nothing to tune).
    """
    name: ClassVar[str]
    """The task's name on the command line and in bertkit_task.json."""
    defaults: ClassVar[Defaults]
    """Epochs, batch size, max length and head learning rate when the config gives none."""
    verb: ClassVar[str] = "classify"
    """Which TaskModel method serves it: classify, tag or answer."""
    pipeline_tag: ClassVar[str] = "text-classification"
    """What the Hugging Face hub files the saved model under (its card's front matter)."""
    library_name: ClassVar[str] = "transformers"
    """The library that loads the saved model, as the hub names it."""
    mixes_layers: ClassVar[bool] = True
    """Whether its head can read a learned mix of all layers (`finetune --layer-mix`)."""
    card_tags: ClassVar[tuple[str, ...]] = ()
    """The card's tags, in place of the source model's, where the saved model is another
    kind (a reranker, a sparse encoder); empty: the source's are kept."""
    memory_advice: ClassVar[str] = "lower --batch-size or --max-length"
    """What a user does about a training step that may not fit in memory (`step_inputs`)."""

    max_length: int = fitted(128)
    """Longest input in tokens (the training setting `--max-length`, or the task's default)."""

    reads_windows: ClassVar[bool | None] = False
    """How `--long-inputs windows` applies to the task's models: True, an input longer than
    max_length is run in windows (`bertkit.text.windows`) and `pool_windows` makes one output
    of theirs; None, the task reads long inputs in windows of its own (qa: its doc stride);
    False, it reads no windows (the flag is refused)."""

    # Settings -----------------------------------------------------------------------------------
    def configure(self, train_path: Path) -> "Task":
        """The settings made concrete for fine-tuning on `train_path` (what None leaves to the
        data, checks of their combination); labels come later, `with_labels`."""
        return self

    def for_backbone(self, model: ModelFacts) -> "Task":
        """The settings made concrete for the model trained (what None leaves to it)."""
        return self

    def with_overrides(self, **values) -> "Task":
        """A copy with the given settings (those this task has; None means keep)."""
        known = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in values.items()
                                            if v is not None and k in known})

    def to_json(self) -> dict:
        """What bertkit_task.json holds: the name and every setting."""
        return {"task": self.name, **{f.name: _jsonable(getattr(self, f.name))
                                      for f in dataclasses.fields(self)}}

    @classmethod
    def from_json(cls, data: dict) -> "Task":
        """The task of a bertkit_task.json; keys it does not know are ignored."""
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in data:  # JSON has lists where the settings hold tuples
                value = data[f.name]
                values[f.name] = tuple(value) if isinstance(f.default, tuple) else value
        return cls(**values)

    @classmethod
    def from_transformers(cls, config: dict) -> "Task | None":
        """The task of a directory saved by transformers (config.json only), if it is this one."""
        return None

    # Data ---------------------------------------------------------------------------------------
    def read(self, path: str | Path) -> list:
        """Labelled examples (for training and evaluation) from a file."""
        raise NotImplementedError

    def read_inputs(self, path: str | Path) -> list:
        """Examples to predict (labels optional) from a file."""
        return self.read(path)

    def unlabelled(self, path: str | Path, tokenizer: Any) -> list:
        """Examples without labels from a file (`finetune --unlabeled`), as `read_inputs` reads
        them and training encodes them; `tokenizer` splits a word task's texts into words."""
        return self.read_inputs(path)

    def with_labels(self, train: Sequence, dev: Sequence) -> "Task":
        """The settings with the label set of `train`; raises naming the line of an unknown
        label in `dev`."""
        return self

    def label_names(self) -> tuple[str, ...]:
        """The class names of the head's outputs, saved as id2label in config.json."""
        return ()

    def check(self, examples: Sequence) -> None:
        """Raise naming FILE:LINE when a labelled example has a label the model does not know."""

    def groups(self, examples: Sequence) -> list | None:
        """Per example, the group a held-out dev set must keep whole (None: any example)."""
        return None

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples: Sequence, *, training: bool = False,
               skip_no_room: bool = False) -> list[Item]:
        """Model inputs of `examples` (several per example where a task windows its input).
        With `skip_no_room` inputs that cannot be encoded are skipped with a warning."""
        raise NotImplementedError

    def collate(self, items: Sequence[Item]) -> dict:
        """A padded batch of items, with their targets when they have them."""
        batch = pad_inputs(items)
        if items[0].target is not None:
            batch["labels"] = torch.tensor([it.target for it in items])
        return batch

    def training_batch(self, items: Sequence[Item], generator: torch.Generator,
                       share: Sequence[int] | None = None) -> dict:
        """A training batch of items: `collate`'s, where a task draws something per batch (a
        reranker's sampled in-batch negatives) drawn from `generator`, the batch's own. Under
        torchrun, `share`: this rank's positions in the global batch `items`, collated (by
        default alone; a task whose rows meet the batch's others at collation, rerank's
        in-batch negatives, reads them all)."""
        return self.collate(items if share is None else [items[i] for i in share])

    def step_inputs(self, batch_size: int) -> int:
        """The most inputs a training step of `batch_size` items runs through the model at
        once, what its memory is estimated by: one an item."""
        return batch_size

    def batch_order(self, items: Sequence[Item], batch_size: int,
                    generator: torch.Generator) -> list[list[int]]:
        """One training epoch's batches (indices into `items`), drawn from `generator`:
        neighbours in length, so that a batch pads to little."""
        return length_batches([len(it.ids) for it in items], batch_size, generator)

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder: nn.Module, layer_mix: bool = False) -> nn.Module:
        """The encoder with this task's head (not initialised); with `layer_mix` (only where
        `mixes_layers`), the head reads ELMo's learned mix of all layers."""
        raise NotImplementedError

    def load_pretrained(self, model: nn.Module, model_dir: Path) -> None:
        """Load into `model` (its head just initialised) what `model_dir` holds for it beside
        the encoder: nothing for a new head (the default); the sparse task's masked-LM head."""

    def with_steps(self, total_steps: int) -> "Task":
        """The settings for a run of `total_steps` optimisation steps (under a time budget,
        those of the default epochs), for a loss scheduled over the run."""
        return self

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        return model.loss(model(*model_inputs(batch)), batch["labels"])

    def target_count(self, batch: dict) -> float:
        """How many targets `loss` averages over in `batch` (collated, on the CPU): the
        weight of a rank's share of a global batch under torchrun, so that the ranks' losses
        make the mean over the whole batch. By default its rows: a mean over examples."""
        return batch["input_ids"].shape[0]

    def infer(self, model: nn.Module, batch: dict, items: Sequence[Item]) -> list:
        """Raw outputs of one batch, one per item, on the CPU (what `decode_outputs` reads)."""
        raise NotImplementedError

    def teacher_outputs(self, model: nn.Module, batch: dict, items: Sequence[Item]) -> list:
        """What a teacher of this task gives a student to learn, one per item on the CPU: its
        head's raw outputs (`finetune --teacher`, bertkit.finetuning.distillation)."""
        raise UserError(f"the {self.name} task does not learn from a teacher's outputs")

    def sentence_teacher(self, path: Path) -> "Task | None":
        """This task's settings for a sentence encoder as a teacher (a sentence-transformers
        directory, which is what `finetune embed` writes); None: this task's teacher is a
        fine-tuned model of the task (bertkit_task.json)."""
        return None

    def taught_loss(self, model: nn.Module, batch: dict, settings,
                    project: Callable | None = None) -> torch.Tensor:
        """One batch's loss learning a teacher's outputs, `batch["teacher"]` (the items'
        `teacher_outputs` stacked), mixed by `settings.alpha` (a `Distillation`) with the
        labels' loss where the batch has labels. `project`: the student's vectors to the
        teacher's width where they differ (a learned projection; None: the same width)."""
        raise UserError(f"the {self.name} task does not learn from a teacher's outputs")

    def pool_windows(self, outputs: Sequence, windows: Windows, item: Item) -> Any:
        """The output of a long `item` (as `infer` gives one per item) from the outputs of
        its `windows`, where `reads_windows` is True. A window's words are numbered from the
        first it holds (`bertkit.finetuning.inputs.first_window_word`)."""
        raise NotImplementedError

    def decode_outputs(self, outputs: Sequence, items: Sequence[Item],
                       examples: Sequence) -> list:
        """One prediction per example from the outputs of its items."""
        raise NotImplementedError

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples: Sequence, predictions: Sequence) -> dict:
        """Metrics of `predictions` against the labels of `examples`."""
        raise NotImplementedError

    def selection(self, scores: dict) -> float:
        """The figure (from `score`) the best dev checkpoint is kept by; higher is better."""
        raise NotImplementedError

    def selection_name(self, scores: dict) -> str:
        """What `selection` computes, for the lines that report it where no key of `scores`
        holds it (a mean of two figures)."""
        return "selection"

    def baseline(self, train: Sequence, test: Sequence, start: Callable[[], dict]
                 ) -> dict | None:
        """Scores on `test` of a trivial predictor fitted on `train` (None: no such baseline).
        `start()` scores the model before fine-tuning on `test`: the baseline of a task that
        adds no new head, whose untrained model already predicts."""
        return None

    def tune(self, runner: Runner, dev: Sequence) -> "Task":
        """The settings with thresholds fitted on `dev` (the model is `runner`'s). Only what
        `decode_outputs` reads may change: fine-tuning runs the model over dev once
        (`runner.outputs(dev)`, `TaskModel.remembering`) for tuning and the final scores."""
        return self

    # Use ----------------------------------------------------------------------------------------
    def pipeline(self, runner: Runner, *args, **kwargs):
        """What calling the TaskModel returns (pipeline-style dicts)."""
        raise NotImplementedError

    def prediction_rows(self, runner: Runner, path: str | Path) -> list[dict]:
        """One JSON-able row per input of a prediction file."""
        raise NotImplementedError

    def save_model(self, backbone, model: nn.Module, path: Path, *, tokenizer: Any = None,
                   labels: list[str] | None = None) -> Path:
        """Write the trained `model` to `path`: by default as the backbone saves a task model
        (`Backbone.save`, with bertkit_task.json)."""
        return backbone.save(model, path, task=self.to_json(), tokenizer=tokenizer,
                             labels=labels)

    def usage(self, out: str, data: str) -> tuple[str, str]:
        """(a shell line, Python lines) that run the model saved in `out` on `data` (a file
        of the task's inputs), as the model card shows them."""
        return (f"bertkit predict --model {shlex.quote(out)} --input {shlex.quote(data)}",
                f"from bertkit import TaskModel\n\n"
                f"TaskModel.load({json.dumps(out)}).predict_rows({json.dumps(data)})")


# Shared by the tasks ------------------------------------------------------------------------------

def model_inputs(batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


def columns_of(path: Path, columns: Collection[str] = TEXT_COLUMNS) -> list[str]:
    """Column names of a JSON-lines, CSV or TSV file: the first record's keys, or the header
    cut where the reader cuts it (at the delimiter with which it names one of `columns`, the
    text column: `find_delimiter`)."""
    fmt = detect_format(path, columns)
    if fmt == "jsonl":
        return next((list(record) for _, record in read_jsonl(path)), [])
    for _, row, _ in csv_rows(find_delimiter(Source(path, fmt, compression_of(path)), columns)):
        if any(cell.strip() for cell in row):
            return [name.strip().lstrip("\ufeff") for name in row]
    return []


def pick_column(given: str | None, columns: list[str], candidates: Sequence[str], path,
                what: str) -> str:
    """`given`, else the first of `candidates` that the file has; none is an error."""
    if given is not None:
        return given
    for name in candidates:
        if name in columns:
            return name
    raise UserError(f"{path}:1: no {what} column among {', '.join(columns)}; name it with "
                    f"--{what}-column")


def text_lines(path: Path) -> tuple[list[str], list[str]] | None:
    """(texts, FILE:LINE keys) of a .txt prediction file, one text per non-blank line; None for
    other files."""
    if format_suffix(path) != ".txt":
        return None
    lines = [(n, line) for n, line in read_lines(path) if line.strip()]
    if not lines:
        raise UserError(f"{path}: no texts")
    return [line for _, line in lines], [f"{path}:{n}" for n, _ in lines]


def _jsonable(value: Any):
    return list(value) if isinstance(value, tuple) else value


__all__ = ["Task", "Defaults", "Runner", "ModelFacts", "fitted", "setting_fields",
           "task_settings", "model_inputs", "columns_of", "pick_column", "text_lines"]
