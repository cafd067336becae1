"""The fine-tuning tasks, one module each, and the one list of them.

Adding a task: a module here with a frozen dataclass implementing `bertkit.finetuning.task.Task`,
and its class in TASKS. Everything else (the recipe, prediction, saving and loading, the command
line's choices) reads the list.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from bertkit.files import UserError
from bertkit.finetuning.heads import read_task_file
from bertkit.finetuning.task import Task
from bertkit.finetuning.tasks.classify import Classify
from bertkit.finetuning.tasks.embed import Embed
from bertkit.finetuning.tasks.pair import Pair
from bertkit.finetuning.tasks.qa import QA
from bertkit.finetuning.tasks.regress import Regress
from bertkit.finetuning.tasks.rerank import Rerank
from bertkit.finetuning.tasks.spans import Spans
from bertkit.finetuning.tasks.sparse import Sparse
from bertkit.finetuning.tasks.tag import Tag
from bertkit.model import hub
from bertkit.model.kind import SENTENCE_MODULES_FILE

TASKS: tuple[type[Task], ...] = (Classify, Pair, Regress, Tag, QA, Spans, Embed, Rerank,
                                  Sparse)
TASK_NAMES = tuple(t.name for t in TASKS)


def task_type(name: str, task_types: Sequence[type[Task]] = TASKS) -> type[Task]:
    """The task class called `name`."""
    for t in task_types:
        if t.name == name:
            return t
    raise UserError(f"unknown task {name!r}; choose one of "
                    f"{', '.join(t.name for t in task_types)}")


def load_task(path: str | Path, task_types: Sequence[type[Task]] = TASKS) -> Task:
    """The task of a saved model directory: its bertkit_task.json, or for a directory saved by
    transformers the task its config.json describes. A missing max_length is the model's
    (at most 512)."""
    p = Path(path)
    data = read_task_file(p)
    config = hub.load_config(p)
    if data is not None:
        task = task_type(data.get("task", ""), task_types).from_json(data)
    else:
        found = [t.from_transformers(config.extra) for t in task_types]
        task = next((t for t in found if t is not None), None)
        if task is None:
            arch = (config.extra.get("architectures") or [""])[0]
            instead = ("a sentence model, whose vectors `bertkit embed` gives"
                       if (p / SENTENCE_MODULES_FILE).is_file() else
                       f"fine-tune it first, `bertkit finetune TASK --model {p} ...`")
            raise UserError(f"{p}: not a fine-tuned model (no bertkit_task.json, architecture "
                            f"{arch or 'none'}): {instead}")
    if data is None or "max_length" not in data:
        task = task.with_overrides(max_length=min(512, config.max_positions))
    return task


__all__ = ["TASKS", "TASK_NAMES", "task_type", "load_task", "Task", "Classify", "Pair",
           "Regress", "Tag", "QA", "Spans", "Embed", "Rerank", "Sparse"]
