"""A model of `bertkit serve`'s command line loaded for the views it supports, and what it can
do: a fine-tuned model for predictions and its encoder's views, a pretrained one for fill-mask
and the encoder's views, any other encoder for the encoder's views (`bertkit.serve.workbench`
holds the views)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.model.kind import EMBEDDER_KINDS, ModelKind, model_kind, require_kind
from bertkit.serve.search import vectors_note


@dataclass
class ServedModel:
    """One model directory of the command line and what it can do."""

    name: str
    path: Path
    kind: str
    """"pretrained" (encoder and masked-LM head), "ELECTRA (fill-mask by its generator)",
    "encoder" (no trained head: MiniLM,
    a sentence-transformers or ELMo directory; "encoder, untrained head" when fill-mask was
    allowed a random one), "static vectors" (`bertkit static distill`) or the fine-tuned task
    ("classify", "tag", "qa", ...)."""
    embedder: Any = None
    """bertkit.embeddings.embedder.Embedder over the model's encoder; None for a CNN."""
    filler: Any = None
    """bertkit.model.fill_mask.FillMask when the masked-LM head is trained."""
    task_model: Any = None
    """bertkit.finetuning.predict.TaskModel of a fine-tuned model."""
    no_fill_mask: str = ""
    """Why the fill-mask view cannot use this model ("" when it can)."""
    corpus_report: Any = None
    """The anisotropy report of the corpus sample, made on first use of the embeddings view
    (which also gives the embedder a standardizer fitted there when it has none of its own)."""
    sentence: bool = False
    """A sentence-transformers directory: the search view uses its own pooling."""

    def describe(self) -> dict:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind,
                               "fill_mask": not self.no_fill_mask,
                               "fill_mask_note": self.no_fill_mask,
                               "attention": self.has_attention, "embeddings":
                                   self.embedder is not None,
                               "predict": self.task_model is not None,
                               "search": self.embedder is not None,
                               "sentence_model": self.sentence}
        if self.embedder is not None:
            cfg = self.embedder.config
            out.update(architecture=cfg.architecture,
                       layers=cfg.num_layers, heads=cfg.num_heads,
                       hidden_size=cfg.hidden_size, max_length=self.embedder.max_length,
                       mask_token=self.mask_token,
                       search_vectors=vectors_note(self.embedder, self.sentence))
        if self.task_model is not None:
            task = self.task_model.task
            out.update(task=task.name, verb=task.verb, labels=self.task_model.labels)
        return out

    @property
    def has_attention(self) -> bool:
        return self.embedder is not None and self.embedder.config.num_heads > 0

    @property
    def mask_token(self) -> str:
        tok = self.embedder.tokenizer
        return tok.id_to_token(tok.mask_id) if tok.mask_id is not None else ""


def load_served_model(path: str | Path, name: str, device: str | torch.device = "cpu",
                      allow_untrained_head: bool = False) -> ServedModel:
    """A model directory (or a Hugging Face Hub name, fetched into its cache) loaded for the
    views it supports: a fine-tuned model for predictions and its encoder's views, a
    pretrained one for fill-mask and the encoder's views, any other encoder for the encoder's
    views."""
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.sentence_model import read_sentence_model
    from bertkit.embeddings.standardize import STANDARDIZER_FILE, Standardizer
    from bertkit.finetuning.predict import TaskModel
    from bertkit.model.fill_mask import FillMask
    from bertkit.model.info import info

    path = require_kind(path, ModelKind.CNN, *EMBEDDER_KINDS)
    kind = model_kind(path)
    own_standardizer = (Standardizer.load(path / STANDARDIZER_FILE)
                        if (path / STANDARDIZER_FILE).is_file() else None)
    if kind is ModelKind.CNN:
        task_model = TaskModel.load(path, device)
        return ServedModel(name, path, task_model.task.name, task_model=task_model,
                           no_fill_mask="a convolutional classifier has no masked-LM head")
    if kind is ModelKind.TASK:
        task_model = TaskModel.load(path, device)
        embedder = Embedder(task_model.model.encoder, task_model.tokenizer,
                            standardizer=own_standardizer, source=str(path))
        return ServedModel(name, path, task_model.task.name, embedder=embedder,
                           task_model=task_model,
                           no_fill_mask="a fine-tuned model's masked-LM head is gone")
    if kind is ModelKind.ENCODER and FillMask.uses_generator(path):
        # ELECTRA: the discriminator for the encoder's views, its generator guesses
        return ServedModel(name, path, "ELECTRA (fill-mask by its generator)",
                           embedder=Embedder.load(path, device),
                           filler=FillMask.load(path, device))
    sentence = read_sentence_model(path) if kind is ModelKind.ENCODER else None
    if kind is ModelKind.ENCODER and (path / "config.json").is_file():
        untrained = [n for n in info(path).missing if n.startswith("mlm.")]
        if not untrained or allow_untrained_head:
            with warnings.catch_warnings():  # the random head was asked for: no warning
                warnings.simplefilter("ignore")
                filler = FillMask.load(path, device)
            embedder = Embedder(filler.model.encoder, filler.tokenizer,
                                standardizer=own_standardizer, source=str(path),
                                **_sentence_settings(sentence))
            label = "encoder, untrained head" if untrained else "pretrained"
            return ServedModel(name, path, label, embedder=embedder, filler=filler,
                               sentence=sentence is not None)
    embedder = Embedder.load(path, device)
    why = {ModelKind.ELMO: "an ELMo model has no masked-LM head",
           ModelKind.STATIC_SENTENCE: "static vectors have no masked-LM head"}.get(
        kind, "its weights have no trained masked-LM head (an encoder-only checkpoint)")
    static = kind is ModelKind.STATIC_SENTENCE  # its vectors are a sentence model's
    return ServedModel(name, path, "static vectors" if static else "encoder",
                       embedder=embedder, no_fill_mask=why,
                       sentence=sentence is not None or static)


def _sentence_settings(sentence) -> dict:
    """The Embedder settings of a sentence-transformers directory (a SentenceModel), as
    Embedder.load reads them; none for another directory."""
    if sentence is None:
        return {}
    return {"pool": sentence.pool, "normalize": sentence.normalize,
            "lowercase": sentence.lowercase, "max_length": sentence.max_seq_length}


__all__ = ["ServedModel", "load_served_model"]
