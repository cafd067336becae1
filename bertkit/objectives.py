"""Pretraining objectives as pure functions of (model, batch) -> (loss, metrics).

Batches are the dicts of `bertkit.examples.PretrainingBatches`: input_ids / token_type_ids /
attention_mask [B, T]; mlm_positions [N] flat indices into B*T with mlm_labels [N] (-100 marks
a padding entry); nsp_labels [B]; span_left / span_right / span_offset [N] for span masking;
clm_labels [B, T] (the next token at each position, -100 where there is none).

Every function returns a scalar loss (mean over its own targets) and a dict of scalar tensors;
nothing here syncs with the host, so the training step stays asynchronous on a GPU.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

OBJECTIVES = ("mlm", "mlm+nsp", "span", "clm")
IGNORE = -100


def _token_terms(logits: torch.Tensor, labels: torch.Tensor):
    """Summed cross-entropy, correct predictions and target count over labels != -100."""
    valid = labels != IGNORE
    loss_sum = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE, reduction="sum")
    correct = ((logits.argmax(-1) == labels) & valid).sum()
    return loss_sum, correct, valid.sum()


def _mean_terms(logits, labels, prefix: str):
    loss_sum, correct, count = _token_terms(logits, labels)
    n = count.clamp(min=1)
    loss = loss_sum / n
    return loss, {f"{prefix}_loss": loss.detach(), f"{prefix}_acc": correct / n}


def mlm_forward(model: nn.Module, batch: dict):
    """The model on a batch, projecting onto the vocabulary only at the selected positions."""
    return model(batch["input_ids"], batch.get("token_type_ids"), batch.get("attention_mask"),
                 positions=batch["mlm_positions"])


def mlm_loss(model: nn.Module, batch: dict):
    """Masked-LM cross-entropy averaged over the selected tokens."""
    mlm_logits, _, _ = mlm_forward(model, batch)  # [N, V]
    return _mean_terms(mlm_logits, batch["mlm_labels"], "mlm")


def nsp_terms(nsp_logits: torch.Tensor, labels: torch.Tensor):
    loss = F.cross_entropy(nsp_logits.float(), labels)
    acc = (nsp_logits.argmax(-1) == labels).float().mean()
    return loss, {"nsp_loss": loss.detach(), "nsp_acc": acc}


def mlm_nsp_loss(model: nn.Module, batch: dict):
    """BERT: masked LM + next-sentence prediction on [CLS]."""
    mlm_logits, nsp_logits, _ = mlm_forward(model, batch)
    mlm, metrics = _mean_terms(mlm_logits, batch["mlm_labels"], "mlm")
    nsp, nsp_metrics = nsp_terms(nsp_logits, batch["nsp_labels"])
    return mlm + nsp, {**metrics, **nsp_metrics}


def span_loss(model: nn.Module, batch: dict):
    """SpanBERT: masked LM + the span-boundary objective on the same targets."""
    mlm_logits, _, out = mlm_forward(model, batch)
    mlm, metrics = _mean_terms(mlm_logits, batch["mlm_labels"], "mlm")
    h = out.last_hidden_state
    h = h.reshape(-1, h.shape[-1])  # [B*T, H]
    sbo_logits = model.sbo(h.index_select(0, batch["span_left"]),
                           h.index_select(0, batch["span_right"]), batch["span_offset"],
                           model.encoder.embeddings.word.weight, model.mlm.bias)  # [N, V]
    sbo, sbo_metrics = _mean_terms(sbo_logits, batch["mlm_labels"], "sbo")
    return mlm + sbo, {**metrics, **sbo_metrics}


def clm_loss(model: nn.Module, batch: dict):
    """Left-to-right LM: each position predicts the next token, seeing only its left."""
    logits, _, _ = model(batch["input_ids"], batch.get("token_type_ids"),
                         batch.get("attention_mask"), causal=True)  # [B, T, V]
    labels = batch["clm_labels"]
    return _mean_terms(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), "clm")


def loss_for(objective: str) -> Callable:
    """The loss function of an objective name (one of OBJECTIVES)."""
    table = {"mlm": mlm_loss, "mlm+nsp": mlm_nsp_loss, "span": span_loss, "clm": clm_loss}
    if objective not in table:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return table[objective]


def target_count(objective: str) -> Callable[[dict], torch.Tensor]:
    """Number of predicted tokens in a batch, to weigh micro-batches and ranks exactly."""
    key = "clm_labels" if objective == "clm" else "mlm_labels"
    return lambda batch: (batch[key] != IGNORE).sum()


@torch.no_grad()
def evaluate_lm(model: nn.Module, batches: Iterable[dict], objective: str,
                device: torch.device | str = "cpu") -> dict[str, float]:
    """Held-out figures, weighted by targets: eval_loss (the LM part), eval_acc, eval_ppl, and
    eval_nsp_acc for mlm+nsp, eval_sbo_loss for span."""
    device = torch.device(device)
    totals: dict[str, torch.Tensor] = {}

    def add(name, value):
        totals[name] = totals.get(name, 0) + value.detach().double()

    for batch in batches:
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        if objective == "clm":
            logits, _, _ = model(batch["input_ids"], batch.get("token_type_ids"),
                                 batch.get("attention_mask"), causal=True)
            terms = _token_terms(logits.reshape(-1, logits.shape[-1]),
                                 batch["clm_labels"].reshape(-1))
        else:
            mlm_logits, nsp_logits, out = mlm_forward(model, batch)
            terms = _token_terms(mlm_logits, batch["mlm_labels"])
            if objective == "mlm+nsp":
                add("nsp_correct", (nsp_logits.argmax(-1) == batch["nsp_labels"]).sum())
                add("nsp_count", torch.tensor(batch["nsp_labels"].numel()))
            if objective == "span":
                h = out.last_hidden_state.reshape(-1, out.last_hidden_state.shape[-1])
                sbo_logits = model.sbo(h.index_select(0, batch["span_left"]),
                                       h.index_select(0, batch["span_right"]),
                                       batch["span_offset"], model.encoder.embeddings.word.weight,
                                       model.mlm.bias)
                add("sbo_loss", _token_terms(sbo_logits, batch["mlm_labels"])[0])
        add("loss", terms[0])
        add("correct", terms[1])
        add("count", terms[2])
    if not totals:
        raise ValueError("no held-out batches to evaluate on")
    values = {k: float(v) for k, v in totals.items()}
    count = max(values["count"], 1.0)
    loss = values["loss"] / count
    result = {"eval_loss": loss, "eval_acc": values["correct"] / count,
              "eval_ppl": float(torch.tensor(loss).exp()), "eval_tokens": values["count"]}
    if "nsp_count" in values:
        result["eval_nsp_acc"] = values["nsp_correct"] / max(values["nsp_count"], 1.0)
    if "sbo_loss" in values:
        result["eval_sbo_loss"] = values["sbo_loss"] / count
    return result


__all__ = ["OBJECTIVES", "mlm_loss", "mlm_nsp_loss", "span_loss", "clm_loss", "nsp_terms",
           "loss_for", "target_count", "evaluate_lm", "mlm_forward"]
