"""The masked language model (Devlin et al. 2019, as RoBERTa trains it: rows packed back to
back, no next-sentence prediction): predict the masked tokens from both sides. What a user asks
of the trained model: `bertkit fill-mask`."""
from __future__ import annotations

from torch import nn

from bertkit.pretraining.objective import Objective
from bertkit.pretraining.vocab_loss import decode_terms, mean_terms, mlm_forward


def mlm_loss(model: nn.Module, batch: dict):
    """Masked-LM cross-entropy averaged over the selected tokens."""
    z, _ = mlm_forward(model, batch)
    return mean_terms(decode_terms(model, z, batch["mlm_labels"]), "mlm")


class MaskedLM(Objective):
    name = "mlm"
    summary = "masked language model, as RoBERTa: packed, no NSP"

    def loss(self, model: nn.Module, batch: dict):
        return mlm_loss(model, batch)

    def held_out(self, model: nn.Module, batch: dict, add, judged: list):
        return decode_terms(model, mlm_forward(model, batch)[0], batch["mlm_labels"])


__all__ = ["MaskedLM", "mlm_loss"]
