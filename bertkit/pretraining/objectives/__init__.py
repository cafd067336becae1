"""The pretraining objectives, one module each, and the one list of them.

Adding an objective: a module here with a subclass of `bertkit.pretraining.objective.Objective`,
and its class in OBJECTIVES. The recipe, the batches, `evaluate` and the command line's
choices read the list.
"""
from __future__ import annotations

from typing import Sequence

from bertkit.files import UserError
from bertkit.pretraining.held_out import held_out_figures
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.objectives.clm import LeftToRight, clm_loss
from bertkit.pretraining.objectives.distill import Distill
from bertkit.pretraining.objectives.electra import Electra, electra_loss
from bertkit.pretraining.objectives.mlm import MaskedLM, mlm_loss
from bertkit.pretraining.objectives.nsp import NextSentence, mlm_nsp_loss, nsp_terms
from bertkit.pretraining.objectives.span import SBO_FILE, SpanBoundary, span_loss
from bertkit.pretraining.vocab_loss import logit_terms, mlm_forward, vocab_terms

OBJECTIVE_TYPES: tuple[type[Objective], ...] = (MaskedLM, NextSentence, SpanBoundary,
                                                LeftToRight, Electra, Distill)
OBJECTIVES = tuple(o.name for o in OBJECTIVE_TYPES)
"""The objectives' names, as --objective takes them."""


def objective_type(name: str, types: Sequence[type[Objective]] | None = None
                   ) -> type[Objective]:
    """The objective class called `name` (of `types`; none: OBJECTIVE_TYPES as it is now)."""
    types = OBJECTIVE_TYPES if types is None else types
    for t in types:
        if t.name == name:
            return t
    raise UserError(f"unknown objective {name!r}; choose one of "
                    f"{', '.join(t.name for t in types)}")


def objective_named(name: "str | Objective", settings=None,
                    types: Sequence[type[Objective]] | None = None) -> Objective:
    """The objective `name` with `settings` (its Settings' defaults where None); an Objective
    is returned as it is."""
    if isinstance(name, Objective):
        return name
    return objective_type(name, types)(settings)


def loss_for(objective: "str | Objective", settings=None):
    """The loss function (model, batch) -> (loss, metrics) of an objective."""
    return objective_named(objective, settings).loss


def target_count(objective: "str | Objective"):
    """Number of predicted tokens in a batch, to weigh micro-batches and ranks exactly."""
    return objective_named(objective).target_count


def evaluate_lm(model, batches, objective: "str | Objective",
                device="cpu") -> dict[str, float]:
    """`held_out.held_out_figures` of the objective named or given."""
    return held_out_figures(model, batches, objective_named(objective), device)


__all__ = ["OBJECTIVE_TYPES", "OBJECTIVES", "objective_type", "objective_named", "loss_for",
           "target_count", "Objective", "MaskedLM", "NextSentence", "SpanBoundary",
           "LeftToRight", "Electra", "Distill", "SBO_FILE", "mlm_loss", "mlm_nsp_loss",
           "span_loss", "clm_loss", "electra_loss", "nsp_terms", "logit_terms", "mlm_forward",
           "vocab_terms", "evaluate_lm"]

