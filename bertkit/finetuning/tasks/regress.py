"""Regression: a number per text, or per pair of texts (SICK relatedness), from the [CLS]
vector through BertForSequenceClassification with one output and a squared-error loss."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from bertkit.finetuning import baselines, metrics
from bertkit.finetuning.heads import Parts, SequenceClassifier
from bertkit.finetuning.tasks.classify import PAIR_COLUMNS, TextTask, hf_problem


@dataclass(frozen=True)
class Regress(TextTask):
    """One text (or a pair), one number."""
    name: ClassVar[str] = "regress"
    label_kind: ClassVar[str] = "float"
    problem_type: ClassVar[str] = "regression"

    @classmethod
    def pick_pair(cls, given, columns, path) -> str | None:
        # a score may be of one text or of a pair
        return given or next((c for c in PAIR_COLUMNS if c in columns), None)

    @classmethod
    def from_transformers(cls, config: dict) -> "Regress | None":
        return cls() if hf_problem(config) == "regression" else None

    def with_labels(self, train, dev) -> "Regress":
        return self

    def check(self, examples) -> None:
        pass  # any number is a label

    def target(self, label) -> float:
        return float(label)

    def collate(self, items) -> dict:
        batch = super().collate(items)
        if "labels" in batch:
            batch["labels"] = batch["labels"].float()
        return batch

    def make_model(self, encoder, layer_mix: bool = False) -> SequenceClassifier:
        return SequenceClassifier(encoder, 1, self.problem_type, self.pooling or "cls",
                                  Parts(layer_mix=layer_mix))

    def soft_loss(self, student, teacher, temperature: float) -> torch.Tensor:
        """The teacher's term: squared error to its score (no distribution to soften)."""
        return F.mse_loss(student.float(), teacher.float())

    def decode_outputs(self, outputs, items, examples) -> list[tuple]:
        """(value, None) per example."""
        return [(float(out[0]), None) for out in outputs]

    def score(self, examples, predictions) -> dict:
        return metrics.regression_scores([ex.label for ex in examples],
                                         [p for p, _ in predictions])

    def selection(self, scores: dict) -> float:
        return scores["pearson"]

    def baseline(self, train, test, start) -> dict:
        return baselines.mean_value(train, test)

    def answer_row(self, value, _) -> dict:
        return {"score": value}


__all__ = ["Regress"]
