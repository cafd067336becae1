"""Classification of one text: a label per text, or several (multi-label, a sigmoid per label).

`TextTask` is what every task over texts in a JSON-lines, CSV or TSV file shares (columns,
reading, [CLS] classification through BertForSequenceClassification); pair (pair.py) and
regress (regress.py) build on it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Sequence

import torch

from bertkit.files import UserError
from bertkit.finetuning import baselines, metrics
from bertkit.finetuning.heads import SequenceClassifier
from bertkit.finetuning.inputs import Item
from bertkit.finetuning.readers import (TextExample, check_labels, collect_labels,
                                        detect_format, read_text_examples)
from bertkit.finetuning.task import (Defaults, Task, columns_of, model_inputs, pick_column,
                                     text_lines)

TEXT_COLUMNS = ("text", "sentence", "premise", "sentence1", "question")
PAIR_COLUMNS = ("pair", "hypothesis", "sentence2", "text_b")
LABEL_COLUMNS = ("label", "labels", "score", "relatedness")


@dataclass(frozen=True)
class TextTask(Task):
    """Texts (and optionally a second text each) with a label per row."""
    defaults: ClassVar[Defaults] = Defaults(epochs=3, batch_size=32, max_length=128,
                                            small_model_epochs=10)
    label_kind: ClassVar[str] = "single"
    """How the label column reads: single (a class), multi (a list of classes), float."""

    text_column: str = "text"
    """Column of the text."""
    pair_column: str | None = None
    """Column of the second text, if any."""
    label_column: str | None = "label"
    """Column of the label."""
    labels: tuple[str, ...] = ()
    """The class names, in the order of the classifier's outputs."""
    pooling: str = "cls"
    """What the head reads: [CLS] ("cls") or the mean of the last layer over the tokens
    ("mean")."""

    @classmethod
    def configure(cls, cfg, train_path: Path) -> "TextTask":
        fmt = detect_format(train_path)
        if fmt not in ("jsonl", "csv", "tsv"):
            raise UserError(f"{train_path}: {cls.name} reads JSON lines, CSV or TSV, not {fmt}")
        columns = columns_of(Path(train_path))
        return cls(max_length=cfg.max_length or cls.defaults.max_length,
                   text_column=pick_column(cfg.text_column, columns, TEXT_COLUMNS, train_path,
                                           "text"),
                   pair_column=cls.pick_pair(cfg.pair_column, columns, train_path),
                   label_column=pick_column(cfg.label_column, columns, LABEL_COLUMNS,
                                            train_path, "label"))

    @classmethod
    def pick_pair(cls, given: str | None, columns: list[str], path) -> str | None:
        return given

    def to_json(self) -> dict:
        return {**super().to_json(), "label_kind": self.label_kind}

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list[TextExample]:
        return read_text_examples(path, text_column=self.text_column,
                                  pair_column=self.pair_column, label_column=self.label_column,
                                  label_kind=self.label_kind)

    def read_inputs(self, path) -> list[TextExample]:
        p = Path(path)
        lines = text_lines(p)
        if lines is not None:
            return [TextExample(text, source=key) for text, key in zip(*lines)]
        fmt = detect_format(p)
        if fmt not in ("jsonl", "csv", "tsv"):
            raise UserError(f"{p}: a {self.name} model reads .txt, JSONL, CSV or TSV here, "
                            f"not {fmt}")
        return read_text_examples(p, text_column=self.text_column or "text",
                                  pair_column=self.pair_column, label_column=None, fmt=fmt)

    def with_labels(self, train, dev) -> "TextTask":
        labels = collect_labels(train)
        if len(labels) < 2:
            raise UserError(f"{train[0].source.rsplit(':', 1)[0]}: only one label "
                            f"({labels[0]}) in the training data")
        check_labels(dev, labels)
        return dataclasses.replace(self, labels=tuple(labels))

    def label_names(self) -> tuple[str, ...]:
        return self.labels

    def check(self, examples) -> None:
        check_labels(examples, self.labels)  # an unknown label names its line

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False) -> list[Item]:
        pairs = [ex.pair for ex in examples] if any(ex.pair is not None for ex in examples) \
            else None
        enc = tokenizer.encode_batch([ex.text for ex in examples], pairs,
                                     max_length=self.max_length, truncation="longest_first",
                                     with_offsets=False)
        return [Item(i, e.ids, e.type_ids,
                     target=None if ex.label is None else self.target(ex.label), cut=bool(cut))
                for i, (ex, e, cut) in enumerate(zip(examples, enc, enc.cut))]

    def target(self, label):
        """What the loss learns from one label."""
        return self.labels.index(label) if label in self.labels else None

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder) -> SequenceClassifier:
        return SequenceClassifier(encoder, len(self.labels), pooling=self.pooling)

    def infer(self, model, batch, items) -> list:
        return list(model(*model_inputs(batch)).float().cpu().unbind(0))

    def decode_outputs(self, outputs, items, examples) -> list[tuple]:
        """(label, probability) per example."""
        out = []
        for logits in outputs:
            p = torch.softmax(logits, -1)
            out.append((self.labels[int(p.argmax())], float(p.max())))
        return out

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples, predictions) -> dict:
        return metrics.classification_scores([ex.label for ex in examples],
                                             [p for p, _ in predictions], self.labels)

    def selection(self, scores: dict) -> float:
        return scores["accuracy"]

    def baseline(self, train, test) -> dict:
        return baselines.majority_class(train, test, self.labels)

    # Use ----------------------------------------------------------------------------------------
    def pipeline(self, runner, texts: Sequence[str] | str, pairs: Sequence[str] | None = None):
        """[{"label", "score"}] per text (pipeline("text-classification") style)."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        pairs = [pairs] if single and isinstance(pairs, str) else pairs
        examples = [TextExample(t, None if pairs is None else pairs[i])
                    for i, t in enumerate(texts)]
        out = [self.answer_row(*p) for p in runner.predict(examples)]
        return out[0] if single else out

    def answer_row(self, label, score) -> dict:
        """One prediction as the Python API and `bertkit predict` give it."""
        return {"label": label, "score": score}

    def prediction_rows(self, runner, path) -> list[dict]:
        examples = self.read_inputs(path)
        texts = [ex.text for ex in examples]
        pairs = [ex.pair for ex in examples] if examples[0].pair is not None else None
        return [{"text": ex.text, **({"pair": ex.pair} if ex.pair is not None else {}), **r}
                for ex, r in zip(examples, runner.classify(texts, pairs))]


def hf_problem(config: dict) -> str | None:
    """The problem type of a transformers sequence classifier's config.json (None: another
    architecture)."""
    if (config.get("architectures") or [""])[0] != "BertForSequenceClassification":
        return None
    return config.get("problem_type") or "single_label_classification"


@dataclass(frozen=True)
class Classify(TextTask):
    """One text, one class (or, with multi_label, any number of classes)."""
    name: ClassVar[str] = "classify"

    multi_label: bool = False
    """Several labels per text (a JSON list or `a|b`), a sigmoid per label."""

    @classmethod
    def configure(cls, cfg, train_path: Path) -> "Classify":
        return dataclasses.replace(super().configure(cfg, train_path),
                                   multi_label=cfg.multi_label)

    @property
    def label_kind(self) -> str:  # type: ignore[override]
        return "multi" if self.multi_label else "single"

    @classmethod
    def from_json(cls, data: dict) -> "Classify":
        return dataclasses.replace(super().from_json(data),
                                   multi_label=data.get("label_kind") == "multi")

    @classmethod
    def from_transformers(cls, config: dict) -> "Classify | None":
        if hf_problem(config) not in ("single_label_classification",
                                      "multi_label_classification"):
            return None
        labels = [config["id2label"][k] for k in sorted(config.get("id2label", {}), key=int)]
        return cls(labels=tuple(labels),
                   multi_label=hf_problem(config) == "multi_label_classification")

    def target(self, label):
        if self.multi_label:
            return [float(name in label) for name in self.labels]
        return super().target(label)

    def collate(self, items) -> dict:
        batch = super().collate(items)
        if self.multi_label and "labels" in batch:
            batch["labels"] = batch["labels"].float()
        return batch

    def make_model(self, encoder) -> SequenceClassifier:
        return SequenceClassifier(encoder, len(self.labels),
                                  "multi_label_classification" if self.multi_label
                                  else "single_label_classification", self.pooling)

    def decode_outputs(self, outputs, items, examples) -> list[tuple]:
        """(label, probability) per example; multi-label: (labels, every label's probability)."""
        if not self.multi_label:
            return super().decode_outputs(outputs, items, examples)
        out = []
        for logits in outputs:
            p = torch.sigmoid(logits)
            out.append(([self.labels[k] for k in (p > 0.5).nonzero().flatten().tolist()],
                        p.tolist()))
        return out

    def score(self, examples, predictions) -> dict:
        if not self.multi_label:
            return super().score(examples, predictions)
        return metrics.multilabel_scores([ex.label for ex in examples],
                                         [p for p, _ in predictions], self.labels)

    def baseline(self, train, test) -> dict:
        if self.multi_label:
            return baselines.majority_label_set(train, test, self.labels)
        return super().baseline(train, test)

    def answer_row(self, label, score) -> dict:
        if self.multi_label:
            return {"labels": label, "scores": dict(zip(self.labels, score))}
        return super().answer_row(label, score)


__all__ = ["TextTask", "Classify", "hf_problem", "TEXT_COLUMNS", "PAIR_COLUMNS", "LABEL_COLUMNS"]
