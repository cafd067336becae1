"""Ask a model pretrained with next-sentence prediction (`pretrain --objective mlm+nsp`, or
transformers' BertForPreTraining) whether one sentence follows another: the probability its
NSP head gives "B follows A", read from [CLS] of "[CLS] A [SEP] B [SEP]" (Devlin et al. 2019;
Jurafsky & Martin's chapter on masked language models pairs "I went to the store." with a
continuation and with a random sentence).

    nsp = NextSentence.load("runs/bert-nsp")
    nsp("I went to the store.", "I bought some milk.")       # near 1 for a trained head
    nsp.batch([("I went to the store.", "Penguins live in Antarctica.")])
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

import torch

from bertkit.files import UserError
from bertkit.model.heads import PretrainingModel
from bertkit.model.hub import load_pretraining_model, resolve_model
from bertkit.model.kind import ModelKind, require_kind
from bertkit.runtime import resolve_device
from bertkit.text.tokenizer import Tokenizer

IS_NEXT = 0
"""The NSP head's class for "B follows A" (BERT's label 0; 1 is "B is random")."""


class NextSentence:
    """A model with a trained next-sentence head and its tokenizer, asked about pairs."""

    def __init__(self, model: PretrainingModel, tokenizer: Tokenizer,
                 device: str | torch.device = "cpu"):
        if model.nsp is None:
            raise UserError(f"a \"{model.config.architecture}\" model has no next-sentence "
                            f"head: pretrain a \"bert\" one with --objective mlm+nsp")
        untrained = sorted(k for k in model.not_loaded if k.startswith("nsp."))
        if untrained:
            raise UserError(f"the model's next-sentence head was not trained (no "
                            f"{', '.join(untrained)} in its weights): pretrain with "
                            f"--objective mlm+nsp")
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu",
             revision: str | None = None) -> "NextSentence":
        """From a model directory (or a Hub name at `revision`) with its tokenizer files."""
        path = require_kind(resolve_model(path, revision), ModelKind.ENCODER)
        with torch.random.fork_rng(devices=[]):  # a missing head draws globally
            with warnings.catch_warnings():  # said as one error line instead, just below
                warnings.simplefilter("ignore")
                model = load_pretraining_model(path, resolve_device(device))
        return cls(model, Tokenizer.load(path), device)

    @torch.inference_mode()
    def batch(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """P(B follows A) for each (A, B)."""
        if not pairs:
            return []
        encoded = self.tokenizer.encode_batch([a for a, _ in pairs], [b for _, b in pairs],
                                              max_length=self.model.config.max_positions,
                                              with_offsets=False)
        ids, types, mask = encoded.as_tensors(self.device)
        _, logits, _ = self.model(ids, types, mask)  # [B, 2]
        return logits.float().softmax(-1)[:, IS_NEXT].tolist()

    def __call__(self, first: str, second: str) -> float:
        """P(`second` follows `first`)."""
        return self.batch([(first, second)])[0]


def next_sentence(model: str | Path, first: str, second: str,
                  device: str | torch.device = "cpu") -> float:
    """P(`second` follows `first`) by the next-sentence head of the model directory `model`."""
    return NextSentence.load(model, device)(first, second)


__all__ = ["NextSentence", "next_sentence", "IS_NEXT"]
