"""BERT's objective as published (Devlin et al. 2019): the masked language model and next-sentence
prediction, whether the second segment of a pair follows the first, read from [CLS]. Only the
"bert" architecture has the next-sentence head. What a user asks of the trained model:
`bertkit fill-mask`, and `bertkit.model.next_sentence` whether B follows A."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.files import UserError
from bertkit.model.encoder import cls_rows
from bertkit.pretraining.objective import ExampleShape, Objective
from bertkit.pretraining.vocab_loss import decode_terms, mean_terms, mlm_forward


def nsp_terms(nsp_logits: torch.Tensor, labels: torch.Tensor):
    loss = F.cross_entropy(nsp_logits.float(), labels)
    acc = (nsp_logits.argmax(-1) == labels).float().mean()
    return loss, {"nsp_loss": loss.detach(), "nsp_accuracy": acc}


def _mlm_nsp_forward(model: nn.Module, batch: dict):
    """(last block's output at the masked positions [N, H], next-sentence logits [B, 2])
    from one pass."""
    z, (cls,) = mlm_forward(model, batch, cls_rows(batch["input_ids"]))
    return z, model.nsp(model.encoder.pool(cls))


def mlm_nsp_loss(model: nn.Module, batch: dict):
    """BERT: masked LM + next-sentence prediction on [CLS]."""
    z, nsp_logits = _mlm_nsp_forward(model, batch)
    mlm, metrics = mean_terms(decode_terms(model, z, batch["mlm_labels"]), "mlm")
    nsp, nsp_metrics = nsp_terms(nsp_logits, batch["nsp_labels"])
    return mlm + nsp, {**metrics, **nsp_metrics}


class NextSentence(Objective):
    name = "mlm+nsp"
    summary = "BERT's: with next-sentence prediction, NSP; \"bert\" only"
    examples = ExampleShape(rows="pairs")
    query = ('bertkit next-sentence --model {model} --first "I went to the store." '
             '--second "I bought some milk."')

    def fit(self, model: nn.Module, init: Path | None, seed: int) -> nn.Module:
        if model.nsp is None:
            raise UserError(f"--objective mlm+nsp needs a next-sentence head, which the "
                            f"{model.config.architecture} architecture has not; use "
                            f"--architecture bert")
        return model  # it trains every head

    def loss(self, model: nn.Module, batch: dict):
        return mlm_nsp_loss(model, batch)

    def held_out(self, model: nn.Module, batch: dict, add, judged: list):
        z, nsp_logits = _mlm_nsp_forward(model, batch)
        add("nsp_correct", (nsp_logits.argmax(-1) == batch["nsp_labels"]).sum())
        add("nsp_count", torch.tensor(batch["nsp_labels"].numel()))
        return decode_terms(model, z, batch["mlm_labels"])

    def figures(self, values: dict[str, float], judged: list) -> dict[str, float]:
        return {"eval_nsp_accuracy": values["nsp_correct"] / max(values["nsp_count"], 1.0)}

    def untrained_parts(self, model: nn.Module) -> list[str]:
        return []


__all__ = ["NextSentence", "mlm_nsp_loss", "nsp_terms"]
