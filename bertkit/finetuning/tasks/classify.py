"""Classification of one text: a label per text, or several (multi-label, a sigmoid per label).

`TextTask` is what every task over texts in a JSON-lines, CSV or TSV file shares (columns,
reading, [CLS] classification through BertForSequenceClassification); pair (pair.py) and
regress (regress.py) build on it.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Sequence

import torch

from bertkit.files import UserError
from bertkit.finetuning import baselines, distillation, metrics
from bertkit.finetuning.heads import POOLINGS, Parts, SequenceClassifier
from bertkit.finetuning.inputs import Item
from bertkit.finetuning.readers import (TEXT_COLUMNS, TextExample, check_labels,
                                        collect_labels, detect_format, read_text_examples)
from bertkit.finetuning.task import (Defaults, ModelFacts, Task, columns_of, fitted,
                                     model_inputs, pick_column, text_lines)

PAIR_COLUMNS = ("pair", "hypothesis", "sentence2", "text_b")
LABEL_COLUMNS = ("label", "labels", "score", "relatedness")


@dataclass(frozen=True)
class TextTask(Task):
    """Texts (and optionally a second text each) with a label per row."""
    defaults: ClassVar[Defaults] = Defaults(epochs=3, batch_size=32, max_length=128,
                                            small_model_epochs=10)
    label_kind: ClassVar[str] = "single"
    """How the label column reads: single (a class), multi (a list of classes), float."""

    text_column: str | None = None
    """Column of the text; none: the first the file has of text, sentence, premise, sentence1,
    question."""
    pair_column: str | None = None
    """Column of the second text; none: classify has none, pair takes the first the file has of
    pair, hypothesis, sentence2, text_b, regress one of those if the file has it."""
    label_column: str | None = None
    """Column of the label; none: the first the file has of label, labels, score,
    relatedness."""
    pooling: Literal["cls", "mean"] | None = None
    """What the head reads, [CLS] ("cls"; through the pooler for a "bert" encoder) or the mean
    of the last layer over the tokens ("mean"); none: "mean" for a "modern" encoder, whose
    masked-LM pretraining never trains [CLS], "cls" for "bert" (BERT's pretraining trains it
    for next-sentence prediction). The 60-minute `mini` of docs/recipe.md, three seeds
    each: SICK 0.711 by the mean against 0.689 by [CLS], movie reviews 0.786 against 0.777."""
    labels: tuple[str, ...] = fitted(())
    """The class names, in the order of the classifier's outputs."""

    problem_type: ClassVar[str] = "single_label_classification"
    """The head's loss (`bertkit.finetuning.heads.problem_loss`), for any model family."""
    reads_windows: ClassVar[bool | None] = True

    @property
    def pairs(self) -> bool:
        """Whether each example has a second text."""
        return self.pair_column is not None

    def configure(self, train_path: Path) -> "TextTask":
        fmt = detect_format(train_path, self.text_columns)
        if fmt not in ("jsonl", "csv", "tsv"):
            raise UserError(f"{train_path}: {self.name} reads JSON lines, CSV or TSV, not {fmt}")
        return self.with_columns(Path(train_path))

    @property
    def text_columns(self) -> tuple[str, ...]:
        """The text column's name, or the names it may go by (TEXT_COLUMNS)."""
        return (self.text_column,) if self.text_column else TEXT_COLUMNS

    def with_columns(self, path: Path) -> "TextTask":
        """The columns left None picked from those of the file at `path`."""
        columns = columns_of(path, self.text_columns)
        return dataclasses.replace(
            self, text_column=pick_column(self.text_column, columns, TEXT_COLUMNS, path, "text"),
            pair_column=self.pick_pair(self.pair_column, columns, path),
            label_column=pick_column(self.label_column, columns, LABEL_COLUMNS, path, "label"))

    def for_backbone(self, model: ModelFacts) -> "TextTask":
        if model.architecture is None:  # not a transformer: its own way of reading a text
            if self.pooling is not None:
                raise UserError("--pooling needs a transformer encoder, which this backbone "
                                "is not")
            return dataclasses.replace(self, pooling="cls")
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise UserError(f"--pooling must be one of {', '.join(POOLINGS)}, "
                            f"got {self.pooling!r}")
        return dataclasses.replace(self, pooling=self.pooling or (
            "mean" if model.architecture == "modern" else "cls"))

    @classmethod
    def pick_pair(cls, given: str | None, columns: list[str], path) -> str | None:
        return given

    def to_json(self) -> dict:
        return {**super().to_json(), "label_kind": self.label_kind}

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list[TextExample]:
        task = self if self.text_column and self.label_column else self.with_columns(Path(path))
        return read_text_examples(path, text_column=task.text_column,
                                  pair_column=task.pair_column, label_column=task.label_column,
                                  label_kind=self.label_kind)

    def read_inputs(self, path) -> list[TextExample]:
        p = Path(path)
        lines = text_lines(p)
        if lines is not None:  # a model of pairs: TEXT<TAB>PAIR, as `embed` reads a pair
            if self.pairs and (bad := next((k for t, k in zip(*lines) if "\t" not in t), None)):
                raise UserError(f"{bad}: a {self.name} model reads a pair a line, TEXT<TAB>PAIR: "
                                f"this line has no tab")
            return [TextExample(*(text.split("\t", 1) if self.pairs else [text]), source=key)
                    for text, key in zip(*lines)]
        fmt = detect_format(p, [self.text_column or "text"])
        if fmt not in ("jsonl", "csv", "tsv"):
            # short texts split by spaces look like CoNLL: only the suffix tells them apart
            raise UserError(f"{p}: a {self.name} model reads .txt, JSONL, CSV or TSV here, "
                            f"not {fmt} (one text a line: name the file .txt)")
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
    def make_model(self, encoder, layer_mix: bool = False) -> SequenceClassifier:
        return SequenceClassifier(encoder, len(self.labels), self.problem_type,
                                  self.pooling or "cls", Parts(layer_mix=layer_mix))

    def infer(self, model, batch, items) -> list:
        return list(model(*model_inputs(batch)).float().cpu().unbind(0))

    def teacher_outputs(self, model, batch, items) -> list:
        return self.infer(model, batch, items)  # the logits: [K] per text

    def taught_loss(self, model, batch, settings, project=None) -> torch.Tensor:
        logits = model(*model_inputs(batch))
        labels = model.loss(logits, batch["labels"]) if "labels" in batch else None
        return distillation.mixed(settings.alpha, self.soft_loss(
            logits, batch["teacher"].to(logits.device), settings.temperature), labels)

    def soft_loss(self, student, teacher, temperature: float) -> torch.Tensor:
        """The teacher's term: KL between the softened class distributions."""
        return distillation.soft_kl(student, teacher, temperature)

    def pool_windows(self, outputs, windows, item) -> torch.Tensor:
        """The mean of the windows' logits (a pair's: of windows over its second text)."""
        return torch.stack(list(outputs)).mean(0)

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

    def baseline(self, train, test, start) -> dict:
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
    """One text, one class (or, with --multi-label, any number of classes)."""
    name: ClassVar[str] = "classify"

    multi_label: bool = False
    """Several labels per text (a JSON list or `a|b`), a sigmoid per label."""

    @property
    def label_kind(self) -> str:  # type: ignore[override]
        return "multi" if self.multi_label else "single"

    @property
    def problem_type(self) -> str:  # type: ignore[override]
        return "multi_label_classification" if self.multi_label \
            else "single_label_classification"

    @classmethod
    def pick_pair(cls, given: str | None, columns: list[str], path) -> str | None:
        second = next((c for c in PAIR_COLUMNS if c in columns), None)
        if given is None and second is not None:
            # a file of pairs (SICK) would train on its first texts alone, without a word
            print(f"warning: {path} has a second text, column {second!r}, that classify "
                  f"leaves out: `finetune pair` (or --pair-column {second}) reads the pairs",
                  file=sys.stderr)
        return given

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

    def soft_loss(self, student, teacher, temperature: float) -> torch.Tensor:
        """Multi-label: each label's softened sigmoid learned as a distribution of its own."""
        if self.multi_label:
            return distillation.soft_bce(student, teacher, temperature)
        return super().soft_loss(student, teacher, temperature)

    def score(self, examples, predictions) -> dict:
        if not self.multi_label:
            return super().score(examples, predictions)
        return metrics.multilabel_scores([ex.label for ex in examples],
                                         [p for p, _ in predictions], self.labels)

    def baseline(self, train, test, start) -> dict:
        if self.multi_label:
            return baselines.majority_label_set(train, test, self.labels)
        return super().baseline(train, test, start)

    def answer_row(self, label, score) -> dict:
        if self.multi_label:
            return {"labels": label, "scores": dict(zip(self.labels, score))}
        return super().answer_row(label, score)


__all__ = ["TextTask", "Classify", "hf_problem", "TEXT_COLUMNS", "PAIR_COLUMNS", "LABEL_COLUMNS"]
