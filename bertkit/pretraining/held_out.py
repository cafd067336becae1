"""Held-out figures of a model on fixed batches, as pretraining logs them at each evaluation and
`evaluate` gives them for a prepared directory: the language model's loss, accuracy and
perplexity, weighted by targets, and the objective's own figures beside them."""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from bertkit.pretraining.objective import Objective


@torch.no_grad()
def held_out_figures(model: nn.Module, batches: Iterable[dict], objective: Objective,
                     device: torch.device | str = "cpu") -> dict[str, float]:
    """eval_loss (the LM part: ELECTRA's generator), eval_accuracy, eval_perplexity,
    eval_tokens, and the objective's `figures` (eval_nsp_accuracy for mlm+nsp,
    eval_sbo_loss for span, ELECTRA's detection figures)."""
    device = torch.device(device)
    totals: dict[str, torch.Tensor] = {}
    judged: list = []

    def add(name, value):
        totals[name] = totals.get(name, 0) + value.detach().double()

    for batch in batches:
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        terms = objective.held_out(model, batch, add, judged)
        add("loss", terms[0])
        add("correct", terms[1])
        add("count", terms[2])
    if not totals:
        raise ValueError("no held-out batches to evaluate on")
    values = {k: float(v) for k, v in totals.items()}
    count = max(values["count"], 1.0)
    loss = values["loss"] / count
    return {"eval_loss": loss, "eval_accuracy": values["correct"] / count,
            "eval_perplexity": float(torch.tensor(loss).exp()), "eval_tokens": values["count"],
            **objective.figures(values, judged)}


__all__ = ["held_out_figures"]
