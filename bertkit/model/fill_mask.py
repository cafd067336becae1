"""Fill in the blanks: the masked-LM head's top-k guesses for each [MASK] in a text.

Each guess is a dict in the shape of transformers' `pipeline("fill-mask")`: {"score", "token"
(the id), "token_str", "sequence"}; `sequence` is the text with that guess in its [MASK],
decoded as the pipeline decodes it (special tokens dropped when the text has one [MASK], kept
when it has several, the other [MASK]s left in place).

Only the [MASK] positions are projected onto the vocabulary (`positions=` in
`PretrainingModel.forward`); texts are sorted by length and batched so that padding is small.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertkit.files import UserError
from bertkit.model.heads import PretrainingModel
from bertkit.model.hub import is_electra_dir, load_electra, load_pretraining_model, resolve_model
from bertkit.model.kind import ModelKind, require_kind
from bertkit.runtime import resolve_device
from bertkit.text.tokenizer import Tokenizer


class FillMask:
    """A pretraining model and its tokenizer, called on texts holding [MASK]."""

    def __init__(self, model: PretrainingModel, tokenizer: Tokenizer,
                 device: str | torch.device = "cpu", batch_size: int = 32):
        if tokenizer.vocab_size > model.config.vocab_size:
            raise UserError(f"the tokenizer's {tokenizer.vocab_size} tokens do not fit the "
                            f"model's vocabulary of {model.config.vocab_size}")
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu",
             batch_size: int = 32, revision: str | None = None) -> "FillMask":
        """From a model directory holding both the weights and the tokenizer files, or a
        model's name on the Hugging Face Hub (at `revision`); another kind of model directory is a
        one-line UserError saying what it holds. An ELECTRA directory guesses with its
        generator (`uses_generator`): the discriminator has no masked-LM head."""
        # a SPLADE model too: its vectors are an MLM head's
        path = require_kind(resolve_model(path, revision), ModelKind.ENCODER, ModelKind.SPARSE)
        tokenizer, device = Tokenizer.load(path), resolve_device(device)
        if is_electra_dir(path):
            return cls(load_electra(path, device).generator, tokenizer, device, batch_size)
        return cls(load_pretraining_model(path, device), tokenizer, device, batch_size)

    @staticmethod
    def uses_generator(path: str | Path) -> bool:
        """Whether `load` guesses with an ELECTRA generator (in GENERATOR_DIR) for `path`."""
        try:
            return is_electra_dir(resolve_model(path))
        except UserError:  # no such model: `load` says so
            return False

    @torch.inference_mode()
    def __call__(self, texts: str | Sequence[str], top_k: int = 5,
                 names: Sequence[str] | None = None) -> list[dict]:
        """For each text, {"text": ..., "masks": [[{"score", "token", "token_str",
        "sequence"}, ...], ...]}: one list per [MASK] in order, best first, scores the softmax
        probabilities, "token" the id. `masks[0]` of a text with one [MASK] is what
        transformers' fill-mask pipeline returns for it; `masks` of a text with several is too.

        A text without [MASK], or longer than the model's positions, is a UserError naming it
        (`names[i]`, else "text i+1")."""
        if isinstance(texts, str):
            texts = [texts]
        if not texts:
            return []
        if top_k < 1:
            raise UserError(f"top_k must be at least 1, got {top_k}")
        top_k = min(top_k, self.model.config.vocab_size)
        tok, mask_id = self.tokenizer, self.tokenizer.mask_id
        names = names or [f"text {i + 1}" for i in range(len(texts))]
        batch = tok.encode_batch(texts, max_length=self.model.config.max_positions,
                                 truncation=False, with_offsets=False, names=names)
        ids, lengths = batch.flat_ids()
        starts = np.concatenate(([0], lengths.cumsum()[:-1]))
        masks_per_text = np.add.reduceat((ids == mask_id).astype(np.int64), starts)
        if (unmasked := np.flatnonzero(masks_per_text == 0)).size:
            i = int(unmasked[0])
            raise UserError(f"{names[i]}: no {tok.id_to_token(mask_id)} in {texts[i][:60]!r}")
        results: list[list] = [[] for _ in texts]
        order = sorted(range(len(texts)), key=lambda i: int(lengths[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            tensors = batch.select(chunk).as_tensors(self.device)
            flat_positions = (tensors.input_ids.flatten() == mask_id).nonzero().squeeze(1)  # [N]
            logits, _, _ = self.model(**tensors._asdict(), positions=flat_positions)  # [N, V]
            probs = logits.float().softmax(-1)
            scores, top = probs.topk(top_k, dim=-1)  # [N, k]
            width = tensors.input_ids.shape[1]
            rows, columns = (flat_positions // width).tolist(), (flat_positions % width).tolist()
            for row, column, s, t in zip(rows, columns, scores.tolist(), top.tolist()):
                text = chunk[row]
                results[text].append(self._guesses(
                    ids[starts[text]:starts[text] + lengths[text]].tolist(), column, t, s,
                    single=int(masks_per_text[text]) == 1))
        return [{"text": text, "masks": masks} for text, masks in zip(texts, results)]

    def _guesses(self, ids: list[int], position: int, top: list[int], scores: list[float],
                 single: bool) -> list[dict]:
        """The pipeline's dicts for one [MASK] at `position` of a text's unpadded `ids`."""
        guesses = []
        for token, score in zip(top, scores):
            filled = list(ids)
            filled[position] = token
            guesses.append({"score": score, "token": token,
                            "token_str": self.tokenizer.decode([token], skip_special_tokens=False),
                            "sequence": self.tokenizer.decode(filled,
                                                              skip_special_tokens=single)})
        return guesses


def fill_mask(model: str | Path | PretrainingModel, texts: str | Sequence[str], top_k: int = 5,
              tokenizer: Tokenizer | None = None,
              device: str | torch.device = "cpu") -> list[dict]:
    """`FillMask` in one call: `model` is a model directory, or a loaded PretrainingModel
    given with its `tokenizer`."""
    if isinstance(model, PretrainingModel):
        if tokenizer is None:
            raise ValueError("a loaded model needs its tokenizer")
        return FillMask(model, tokenizer, device)(texts, top_k)
    return FillMask.load(model, device)(texts, top_k)
