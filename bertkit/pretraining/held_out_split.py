"""The held-out split of a prepared directory scored as `bertkit pretrain` scores it: the same
batches (its --seed + 1 draws their masks), the objective's figures (`held_out_figures`), so
that `evaluate` on a prepared directory gives the figures pretraining logged."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn

from bertkit.files import UserError, read_json
from bertkit.pretraining.examples import PretrainingBatches
from bertkit.pretraining.held_out import held_out_figures
from bertkit.pretraining.masking import MaskingConfig
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.objectives import objective_named
from bertkit.training.settings import SETTINGS_FILE


def corruption(mask_frac: float | None, random_frac: float | None, default_mask: float,
                default_random: float) -> tuple[float, float]:
    """(mask_frac, random_frac) with the input's defaults where None; a split past 1 is the
    user's error."""
    mask = default_mask if mask_frac is None else mask_frac
    random = default_random if random_frac is None else random_frac
    if mask + random > 1 + 1e-9:
        raise UserError(f"--mask-frac {mask} and --random-frac {random} add up to more than 1 "
                        f"(where one is not given, it is {default_mask} and {default_random} "
                        f"for this input)")
    return mask, random


MIN_SCORED_TOKENS = 100
"""Fewer masked tokens than this and held-out figures are noise (an accuracy's standard error
is then over 5 points): `heldout_scores` says so."""


def heldout_batches(data_dir: str | os.PathLike, *, objective: str | Objective = "mlm", seq_len: int = 128,
                    batch_size: int = 16, eval_batches: int = 40, seed: int = 0,
                    whole_word: bool = False, mask_rate: float = 0.15,
                    row_ends: str = "sentence", mask_frac: float | None = None,
                    random_frac: float | None = None,
                    document_boundaries: bool = False) -> list[dict]:
    """The held-out batches `bertkit pretrain` evaluates on for these settings (its --seed is
    `seed`; pretraining draws the held-out masks from seed + 1). mask_frac, random_frac: the
    80/10/10 split, pretraining's defaults where None; document_boundaries: pretraining's."""
    default = MaskingConfig()
    mask_frac, random_frac = corruption(mask_frac, random_frac, default.mask_frac,
                                         default.random_frac)
    held = PretrainingBatches(data_dir, objective=objective, seq_len=seq_len,
                              batch_size=batch_size, split="heldout", seed=seed + 1, prefetch=0,
                              masking=MaskingConfig(mlm_prob=mask_rate, whole_word=whole_word,
                                                    mask_frac=mask_frac, random_frac=random_frac),
                              row_ends=row_ends, document_boundaries=document_boundaries)
    batches = []
    for batch in held:
        batches.append(batch)
        if len(batches) == eval_batches:
            return batches
    return batches


def heldout_scores(model: nn.Module, data_dir: str | os.PathLike, *,
                   objective: str | Objective = "mlm",
                   seq_len: int = 128, batch_size: int = 16, eval_batches: int = 40,
                   seed: int = 0, whole_word: bool = False, mask_rate: float = 0.15,
                   row_ends: str = "sentence", mask_frac: float | None = None,
                   random_frac: float | None = None, document_boundaries: bool = False,
                   device: str | torch.device = "cpu") -> dict[str, float]:
    """`held_out.held_out_figures` over `heldout_batches`: accuracy, loss, perplexity, tokens
    (and nsp_accuracy for mlm+nsp, sbo_loss for span when the model has the span head)."""
    objective = objective_named(objective)
    objective.check_model(model)
    batches = heldout_batches(data_dir, objective=objective, seq_len=seq_len,
                              batch_size=batch_size, eval_batches=eval_batches, seed=seed,
                              whole_word=whole_word, mask_rate=mask_rate, row_ends=row_ends,
                              mask_frac=mask_frac, random_frac=random_frac,
                              document_boundaries=document_boundaries)
    device = torch.device(device)
    was_training = model.training
    model.eval()
    try:
        figures = held_out_figures(model, batches, objective, device)
    finally:
        model.train(was_training)
    # An accuracy of 0 out of nothing, or of a handful, must not pass for a figure.
    if figures["eval_tokens"] == 0:
        raise UserError(f"{data_dir}: the held-out split gives no masked tokens to score; "
                        f"prepare it with more text or a larger --heldout")
    if figures["eval_tokens"] < MIN_SCORED_TOKENS:
        print(f"warning: {data_dir}: only {int(figures['eval_tokens'])} masked tokens of the "
              f"held-out split scored: these figures are noise (prepare it with more text or a "
              f"larger --heldout)", file=sys.stderr)
    # the names pretraining logs, without the split's prefix (README, "Metric names")
    return {k.removeprefix("eval_"): v for k, v in figures.items()}


def recorded_document_boundaries(model_dir: str | os.PathLike,
                                 objective: str | Objective) -> bool:
    """Whether the run that wrote `model_dir` kept document boundaries in its packed rows
    (--document-boundaries, as its training_args.json records it): its held-out rows are
    then scored so too. Off for an objective whose rows are not packed, and for a directory
    without the record (a model of another toolkit, a run before the setting)."""
    path = Path(model_dir) / SETTINGS_FILE
    if objective_named(objective).examples.rows != "packed" or not path.is_file():
        return False
    options = read_json(path, "run settings").get("options")
    return isinstance(options, dict) and options.get("document_boundaries") is True


__all__ = ["heldout_batches", "heldout_scores", "corruption", "MIN_SCORED_TOKENS",
           "recorded_document_boundaries"]
