"""Classification of a pair of texts (NLI, paraphrase): both texts through one encoder as
[CLS] a [SEP] b [SEP], classified like one text."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bertkit.finetuning.tasks.classify import PAIR_COLUMNS, TextTask
from bertkit.finetuning.task import pick_column


@dataclass(frozen=True)
class Pair(TextTask):
    """Two texts, one class."""
    name: ClassVar[str] = "pair"

    @classmethod
    def pick_pair(cls, given, columns, path) -> str:
        return pick_column(given, columns, PAIR_COLUMNS, path, "pair")


__all__ = ["Pair"]
