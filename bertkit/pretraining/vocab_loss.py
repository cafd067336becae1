"""The terms every pretraining objective's loss is made of: a projection onto the vocabulary and
its cross-entropy, summed with its correct guesses and its count of targets, so that
micro-batches, ranks and held-out batches add up exactly before one division.

Batches are the dicts of `bertkit.pretraining.examples.PretrainingBatches`: input_ids /
token_type_ids / attention_mask [B, T]; mlm_positions [N] flat indices into B*T with
mlm_labels [N] (-100 marks a padding entry); the objectives' own keys beside them. Nothing
here syncs with the host, so the training step stays asynchronous on a GPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.fast import vocab_cross_entropy
from bertkit.model.heads import IGNORE_INDEX


def vocab_terms(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                labels: torch.Tensor, fused: bool = True):
    """(summed cross-entropy, correct guesses, target count) of the projection of z [N, H]
    onto the vocabulary (weight [V, H], bias [V]) at labels [N] != IGNORE_INDEX.

    With `fused` and gradients wanted, the projection and the loss run fused
    (`fast.vocab_cross_entropy`), equal to the plain F.linear + F.cross_entropy within float
    rounding (tested).
    """
    if fused and torch.is_grad_enabled() and (z.requires_grad or weight.requires_grad):
        loss_sum, correct = vocab_cross_entropy(z, weight, bias, labels, IGNORE_INDEX)
        return loss_sum, correct, (labels != IGNORE_INDEX).sum()
    return logit_terms(F.linear(z, weight, bias).float(), labels)  # [N, V]


def logit_terms(logits: torch.Tensor, labels: torch.Tensor):
    """`vocab_terms` of logits [N, V] already made."""
    count = (labels != IGNORE_INDEX).sum()
    loss_sum = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    target = logits.gather(1, labels.clamp(min=0)[:, None]).squeeze(1)
    correct = ((target >= logits.amax(-1)) & (labels != IGNORE_INDEX)).sum()
    return loss_sum, correct, count


def decode_terms(model: nn.Module, h: torch.Tensor, labels: torch.Tensor):
    """The MLM head's terms at encoder outputs h [N, H]: `model.mlm(h)`'s cross-entropy, the
    head asked for its pieces so that a `fast` model fuses the projection with the loss."""
    return vocab_terms(model.mlm.transform(h), *model.mlm.decoder(), labels, fused=model.fast)


def mean_terms(terms, prefix: str):
    """(mean loss, {PREFIX_loss, PREFIX_accuracy}) of summed terms."""
    loss_sum, correct, count = terms
    n = count.clamp(min=1)
    loss = loss_sum / n
    return loss, {f"{prefix}_loss": loss.detach(), f"{prefix}_accuracy": correct / n}


def mlm_forward(model: nn.Module, batch: dict, *more_rows: torch.Tensor):
    """The encoder on a batch: the last block's output at the selected positions [N, H] (the
    MLM head is left to `vocab_terms`), and a list of its outputs at each tensor of
    `more_rows`. The last block runs only at these rows (`Encoder.forward_rows`); rows packed
    from several documents (`document_ids`) run each document as if alone."""
    h, *more = model.encoder.forward_rows(batch["input_ids"], batch.get("token_type_ids"),
                                          batch.get("attention_mask"), batch["mlm_positions"],
                                          *more_rows, document_ids=batch.get("document_ids"))
    return h, more


__all__ = ["vocab_terms", "logit_terms", "decode_terms", "mean_terms", "mlm_forward"]
