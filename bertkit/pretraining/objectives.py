"""Pretraining objectives as pure functions of (model, batch) -> (loss, metrics).

Batches are the dicts of `bertkit.pretraining.examples.PretrainingBatches`: input_ids / token_type_ids /
attention_mask [B, T]; mlm_positions [N] flat indices into B*T with mlm_labels [N] (-100 marks
a padding entry); nsp_labels [B]; span_left / span_right / span_offset [N] for span masking;
clm_labels [B, T] (the next token at each position, -100 where there is none); sample_uniform
[N] for electra (each prediction's draw of the generator's sample), whose model is an
`ElectraModel` (the generator and the discriminator; the others take a `PretrainingModel`).

Every function returns a scalar loss (mean over its own targets) and a dict of scalar tensors;
nothing here syncs with the host, so the training step stays asynchronous on a GPU.
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.encoder import cls_rows
from bertkit.model.fast import vocab_cross_entropy
from bertkit.model.heads import IGNORE_INDEX
from bertkit.pretraining import electra

OBJECTIVES = ("mlm", "mlm+nsp", "span", "clm", "electra")
"""The pretraining objectives' names, here and in `examples.PretrainingBatches`."""


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


def _decode_terms(model: nn.Module, h: torch.Tensor, labels: torch.Tensor):
    """The MLM head's terms at encoder outputs h [N, H]: `model.mlm(h)`'s cross-entropy, the
    head asked for its pieces so that a `fast` model fuses the projection with the loss."""
    return vocab_terms(model.mlm.transform(h), *model.mlm.decoder(), labels, fused=model.fast)


def _sbo_terms(model: nn.Module, s: torch.Tensor, labels: torch.Tensor):
    """The span-boundary head's states s [N, H] through the MLM head's decoder."""
    return vocab_terms(s, *model.mlm.decoder(), labels, fused=model.fast)


def _mean(terms, prefix: str):
    loss_sum, correct, count = terms
    n = count.clamp(min=1)
    loss = loss_sum / n
    return loss, {f"{prefix}_loss": loss.detach(), f"{prefix}_accuracy": correct / n}


def mlm_forward(model: nn.Module, batch: dict, *more_rows: torch.Tensor):
    """The encoder on a batch: the last block's output at the selected positions [N, H] (the
    MLM head is left to `vocab_terms`), and a list of its outputs at each tensor of
    `more_rows`. The last block runs only at these rows (`Encoder.forward_rows`)."""
    h, *more = model.encoder.forward_rows(batch["input_ids"], batch.get("token_type_ids"),
                                          batch.get("attention_mask"), batch["mlm_positions"],
                                          *more_rows)
    return h, more


def mlm_loss(model: nn.Module, batch: dict):
    """Masked-LM cross-entropy averaged over the selected tokens."""
    z, _ = mlm_forward(model, batch)
    return _mean(_decode_terms(model, z, batch["mlm_labels"]), "mlm")


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
    mlm, metrics = _mean(_decode_terms(model, z, batch["mlm_labels"]), "mlm")
    nsp, nsp_metrics = nsp_terms(nsp_logits, batch["nsp_labels"])
    return mlm + nsp, {**metrics, **nsp_metrics}


def _span_forward(model: nn.Module, batch: dict):
    """(MLM terms, span-boundary terms) on the same targets, from one pass."""
    z, (left, right) = mlm_forward(model, batch, batch["span_left"], batch["span_right"])
    labels = batch["mlm_labels"]
    sbo = model.sbo(left, right, batch["span_offset"])  # [N, H]
    return _decode_terms(model, z, labels), _sbo_terms(model, sbo, labels)


def span_loss(model: nn.Module, batch: dict):
    """SpanBERT: masked LM + the span-boundary objective on the same targets."""
    mlm_terms, sbo_terms = _span_forward(model, batch)
    mlm, metrics = _mean(mlm_terms, "mlm")
    sbo, sbo_metrics = _mean(sbo_terms, "sbo")
    return mlm + sbo, {**metrics, **sbo_metrics}


def _clm_terms(model: nn.Module, batch: dict):
    h = model.encoder(batch["input_ids"], batch.get("token_type_ids"),
                      batch.get("attention_mask"), causal=True).last_hidden_state  # [B, T, H]
    return _decode_terms(model, h.reshape(-1, h.shape[-1]), batch["clm_labels"].reshape(-1))


def clm_loss(model: nn.Module, batch: dict):
    """Left-to-right LM: each position predicts the next token, seeing only its left."""
    return _mean(_clm_terms(model, batch), "clm")


def _electra_forward(model: nn.Module, batch: dict):
    """(generator terms, discriminator terms, its logits [B, T], replaced [B, T]) of an
    `ElectraModel` on a batch with `sample_uniform` (see `pretraining/electra.py`)."""
    generator, labels = model.generator, batch["mlm_labels"]
    z, _ = mlm_forward(generator, batch)
    logits = generator.mlm(z).float()  # [N, V]: the sample needs them, not only the loss
    sampled = electra.sample_tokens(logits, batch["sample_uniform"])
    ids, replaced = electra.corrupt(batch["input_ids"], batch["mlm_positions"], labels, sampled)
    detected = model(ids, batch.get("token_type_ids"), batch.get("attention_mask"))  # [B, T]
    terms = electra.detection_terms(detected, replaced, batch.get("attention_mask"))
    return logit_terms(logits, labels), terms, detected, replaced


def electra_loss(model: nn.Module, batch: dict,
                 detection_weight: float = electra.DETECTION_WEIGHT):
    """ELECTRA: the generator's masked-LM loss + detection_weight x the discriminator's
    replaced-token loss over every non-padding token."""
    mlm_terms, detection, _, replaced = _electra_forward(model, batch)
    mlm, metrics = _mean(mlm_terms, "mlm")
    rtd, rtd_metrics = _mean(detection, "detection")
    share = replaced.sum() / detection[2].clamp(min=1)
    return mlm + detection_weight * rtd, {**metrics, **rtd_metrics, "replaced_share": share}


def loss_for(objective: str,
             detection_weight: float = electra.DETECTION_WEIGHT) -> Callable:
    """The loss function of an objective name (one of OBJECTIVES); `detection_weight` is
    ELECTRA's λ."""
    table = {"mlm": mlm_loss, "mlm+nsp": mlm_nsp_loss, "span": span_loss, "clm": clm_loss,
             "electra": functools.partial(electra_loss, detection_weight=detection_weight)}
    if objective not in table:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return table[objective]


def target_count(objective: str) -> Callable[[dict], torch.Tensor]:
    """Number of predicted tokens in a batch, to weigh micro-batches and ranks exactly."""
    key = "clm_labels" if objective == "clm" else "mlm_labels"
    return lambda batch: (batch[key] != IGNORE_INDEX).sum()


def _batch_figures(model: nn.Module, batch: dict, objective: str, add, judged: list):
    """One held-out batch: its LM terms, and `add`s the objective's other figures; an ELECTRA
    model's judgements (logit, replaced) of every non-padding token go to `judged`."""
    if objective == "clm":
        return _clm_terms(model, batch)
    if objective == "mlm+nsp":
        z, nsp_logits = _mlm_nsp_forward(model, batch)
        add("nsp_correct", (nsp_logits.argmax(-1) == batch["nsp_labels"]).sum())
        add("nsp_count", torch.tensor(batch["nsp_labels"].numel()))
        return _decode_terms(model, z, batch["mlm_labels"])
    if objective == "span":
        terms, sbo_terms = _span_forward(model, batch)
        add("sbo_loss", sbo_terms[0])
        return terms
    if objective == "electra":
        terms, detection, detected, replaced = _electra_forward(model, batch)
        for name, value in zip(("detection_loss", "detection_correct", "detection_count"),
                               detection):
            add(name, value)
        add("replaced", replaced.sum())
        real = (torch.ones_like(replaced) if batch.get("attention_mask") is None
                else batch["attention_mask"].bool())
        judged.append((detected[real].float().cpu(), replaced[real].cpu()))
        return terms
    return _decode_terms(model, mlm_forward(model, batch)[0], batch["mlm_labels"])


@torch.no_grad()
def evaluate_lm(model: nn.Module, batches: Iterable[dict], objective: str,
                device: torch.device | str = "cpu") -> dict[str, float]:
    """Held-out figures, weighted by targets: eval_loss (the LM part: ELECTRA's generator),
    eval_accuracy, eval_perplexity, eval_tokens, and eval_nsp_accuracy for mlm+nsp,
    eval_sbo_loss for span; for electra the discriminator's eval_detection_loss,
    eval_detection_accuracy and eval_detection_auc over every non-padding token, and
    eval_replaced_share (the tokens the generator's samples changed)."""
    device = torch.device(device)
    totals: dict[str, torch.Tensor] = {}
    judged: list = []

    def add(name, value):
        totals[name] = totals.get(name, 0) + value.detach().double()

    for batch in batches:
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        terms = _batch_figures(model, batch, objective, add, judged)
        add("loss", terms[0])
        add("correct", terms[1])
        add("count", terms[2])
    if not totals:
        raise ValueError("no held-out batches to evaluate on")
    values = {k: float(v) for k, v in totals.items()}
    count = max(values["count"], 1.0)
    loss = values["loss"] / count
    result = {"eval_loss": loss, "eval_accuracy": values["correct"] / count,
              "eval_perplexity": float(torch.tensor(loss).exp()), "eval_tokens": values["count"]}
    if "nsp_count" in values:
        result["eval_nsp_accuracy"] = values["nsp_correct"] / max(values["nsp_count"], 1.0)
    if "sbo_loss" in values:
        result["eval_sbo_loss"] = values["sbo_loss"] / count
    if judged:
        tokens = max(values["detection_count"], 1.0)
        result.update(eval_detection_loss=values["detection_loss"] / tokens,
                      eval_detection_accuracy=values["detection_correct"] / tokens,
                      eval_detection_auc=electra.auc(torch.cat([s for s, _ in judged]),
                                                     torch.cat([r for _, r in judged])),
                      eval_replaced_share=values["replaced"] / tokens)
    return result


__all__ = ["OBJECTIVES", "mlm_loss", "mlm_nsp_loss", "span_loss", "clm_loss", "nsp_terms",
           "electra_loss", "logit_terms",
           "loss_for", "target_count", "evaluate_lm", "mlm_forward", "vocab_terms"]
