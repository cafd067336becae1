"""What fine-tuning trains under a task's head: a backbone.

`Backbone` is what the recipe (`bertkit.finetuning.recipe.finetune`) asks of a model family:
its tokenizer, how long an input it takes, a fresh task model, how to save one, and what a
training step's activations take (for `warn_memory`'s one line before training). Two
families implement it: `Encoder` here (a pretrained BERT directory, bertkit's or a Hugging
Face one) and `bertkit.finetuning.cnn.CnnBackbone` (Kim's CNN over static word vectors). The
recipe never asks which one it holds.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Protocol, Sequence

import torch
from torch import nn

from bertkit.files import UserError
from bertkit.finetuning import heads
from bertkit.finetuning.inputs import Item, check_fit
from bertkit.finetuning.task import Task
from bertkit.model import hub
from bertkit.model.memory import device_memory, memory_warning, step_activation_bytes
from bertkit.text.tokenizer import Tokenizer


class Backbone(Protocol):
    """A model family the recipe fine-tunes (see the module docstring)."""
    tokenizer: Any
    """Texts -> ids, as `Task.encode` calls it."""
    max_positions: int
    """The longest input it takes, in tokens."""
    architecture: str | None
    """A transformer encoder's ("bert", "modern"); None for another family."""
    block_weights: int | None
    """An encoder's block weights, which pick the task's defaults for small models (None:
    not a bertkit encoder)."""
    lowercases: bool
    """Whether its tokenizer lowercases."""
    width: int | None
    """A transformer encoder's hidden size; None for another family."""

    def check_task(self, task: Task) -> None:
        """Raise, before any data is read, when the family cannot train `task`."""
        ...

    def build(self, task: Task, seed: int) -> nn.Module:
        """The model for `task` (labels known), its new weights initialised from `seed`."""
        ...

    def check_fit(self, items: Sequence[Item]) -> None:
        """Raise when encoded inputs do not fit the model (ids beyond its vocabulary, ...)."""
        ...

    def activation_bytes(self, inputs: int, length: int) -> float | None:
        """The activations a training step of `inputs` inputs of `length` tokens keeps, in
        bytes, estimated (None: not estimated for this family)."""
        ...

    def save(self, model: nn.Module, path: Path, *, task: dict, tokenizer: Any = None,
             labels: list[str] | None = None) -> Path:
        """A directory that `bertkit.finetuning.predict.TaskModel.load` reads back."""
        ...


class Encoder:
    """A pretrained transformer encoder (a bertkit or Hugging Face BERT directory) under the
    task's head, saved as the matching transformers Bert*For* directory. `train_layers`:
    None trains everything, 0 only the head, k the top k blocks too; `layer_mix`: the head
    reads a learned mix of all layers (`ScalarMix`)."""

    def __init__(self, model_dir: str | Path, train_layers: int | None = None,
                 layer_mix: bool = False):
        self.model_dir = Path(model_dir)
        self.config = hub.load_config(model_dir)
        self.tokenizer = Tokenizer.load(model_dir)
        self.max_positions = self.config.max_positions
        self.architecture = self.config.architecture
        self.block_weights = self.config.block_weights
        self.width = self.config.hidden_size
        self.lowercases = bool(getattr(self.tokenizer, "do_lower_case", False))
        self.train_layers, self.layer_mix = train_layers, layer_mix

    def check_task(self, task: Task) -> None:
        """Every task has a head for a transformer encoder; a layer mix only some."""
        if self.layer_mix and not task.mixes_layers:
            raise UserError(f"--layer-mix is for tasks whose head reads the encoder's layers; "
                            f"{task.name}'s does not")

    def build(self, task: Task, seed: int) -> nn.Module:
        return build_task_model(task, self.model_dir, seed, self.train_layers, self.layer_mix)

    def check_fit(self, items: Sequence[Item]) -> None:
        check_fit(items, self.tokenizer, self.config, self.model_dir)

    def activation_bytes(self, inputs: int, length: int) -> float:
        return step_activation_bytes(self.config, inputs, length)

    def save(self, model: nn.Module, path: Path, *, task: dict, tokenizer: Any = None,
             labels: list[str] | None = None) -> Path:
        heads.save_task_model(model, path, task=task, tokenizer=tokenizer, labels=labels)
        return Path(path)


def warn_memory(backbone: Backbone, task: Task, batch_size: int, device: torch.device) -> None:
    """One line when a training step's activations (`Task.step_inputs` of the batch at the
    task's max length) are likely not to fit in the device's memory: said before training
    rather than found by running out."""
    inputs = task.step_inputs(batch_size)
    line = memory_warning(backbone.activation_bytes(inputs, task.max_length) or 0,
                          device_memory(device),
                          f"a step of {inputs} inputs of up to {task.max_length} tokens",
                          task.memory_advice)
    if line:
        warnings.warn(line, stacklevel=2)


def build_task_model(task: Task, model_dir: str | Path, seed: int,
                     train_layers: int | None = None, layer_mix: bool = False) -> nn.Module:
    """The pretrained encoder of `model_dir` with the task's head, initialised from `seed`
    (with `layer_mix`, the head reads a learned mix of all layers)."""
    model = heads.task_model(task, hub.load_encoder(model_dir), layer_mix)
    heads.init_head(model, torch.Generator().manual_seed(seed))
    task.load_pretrained(model, Path(model_dir))
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


__all__ = ["Backbone", "Encoder", "build_task_model", "freeze", "warn_memory"]
