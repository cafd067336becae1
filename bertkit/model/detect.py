"""Ask an ELECTRA discriminator (`pretrain --objective electra`, or transformers'
ElectraForPreTraining) which tokens of a text look replaced: per piece, the probability its
detection head gives "replaced" (Clark et al. 2020). A text whose word was swapped for a
plausible other one should show that word higher than the rest.

    detect = ReplacedTokens.load("runs/electra")
    detect("the chef ate the meal .")   # [{"token": "the", "start": 0, "end": 3, "replaced": 0.02}, ...]
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from bertkit.model.heads import ElectraModel
from bertkit.model.hub import load_electra, resolve_model
from bertkit.model.kind import ModelKind, require_kind
from bertkit.runtime import resolve_device
from bertkit.text.tokenizer import Tokenizer


class ReplacedTokens:
    """An ELECTRA discriminator and its tokenizer, asked about texts."""

    def __init__(self, model: ElectraModel, tokenizer: Tokenizer,
                 device: str | torch.device = "cpu"):
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu",
             revision: str | None = None) -> "ReplacedTokens":
        """From an ELECTRA directory (a discriminator, with or without its generator/); any
        other directory is a one-line UserError saying what it holds."""
        path = require_kind(resolve_model(path, revision), ModelKind.ENCODER)
        return cls(load_electra(path, resolve_device(device)), Tokenizer.load(path), device)

    @torch.inference_mode()
    def batch(self, texts: Sequence[str]) -> list[list[dict]]:
        """For each text, its pieces (special ones left out) as {"token", "start", "end",
        "replaced"}: the piece, its characters in the text, P(replaced)."""
        if not texts:
            return []
        encoded = self.tokenizer.encode_batch(list(texts),
                                              max_length=self.model.config.max_positions)
        ids, types, mask = encoded.as_tensors(self.device)
        replaced = self.model(ids, types, mask).float().sigmoid().cpu()  # [B, T]
        special = set(self.tokenizer.special_ids)
        out = []
        for i, e in enumerate(encoded):
            out.append([{"token": tok, "start": start, "end": end,
                         "replaced": float(replaced[i, j])}
                        for j, (id_, tok, (start, end)) in enumerate(zip(e.ids, e.tokens,
                                                                         e.offsets))
                        if id_ not in special and e.attention_mask[j]])
        return out

    def __call__(self, text: str) -> list[dict]:
        return self.batch([text])[0]


def detect_replaced(model: str | Path, text: str,
                    device: str | torch.device = "cpu") -> list[dict]:
    """`ReplacedTokens.batch` of one text by the ELECTRA directory `model`."""
    return ReplacedTokens.load(model, device)(text)


__all__ = ["ReplacedTokens", "detect_replaced"]
