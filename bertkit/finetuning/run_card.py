"""The model card's section on a fine-tuning run (`bertkit.model.card` writes it below the card
of the model fine-tuned from): the model and the data, the dev scores beside the baseline's,
the training settings, how to use the model. `plan` is the run's `recipe.RunPlan`.
"""
from __future__ import annotations

from pathlib import Path

from torch import nn

from bertkit.finetuning.backbone import Encoder
from bertkit.finetuning.task import Task
from bertkit.model.card import card_figure
from bertkit.progress import counted

CARD_TITLE = "Fine-tuned with bertkit"
_NOT_SCORES = ("layer_mix_gamma",)
"""Numbers of dev_metrics.json that are no dev score."""


def card_section(plan, task: Task, final: dict, model: nn.Module) -> str:
    """The model card's section on a run (`bertkit.model.card`), in the shape of transformers'
    Trainer's card: the model fine-tuned from and the data, the dev scores of dev_metrics.json
    (`final`) beside the baseline's, the training settings, how to use the model. No date,
    time or machine in it: the same run writes the same card."""
    head = any(p.requires_grad and not n.startswith("encoder.")
               for n, p in model.named_parameters())  # a sentence encoder may have none
    return "\n\n".join([_card_lead(plan, task), _card_scores(final),
                        _card_settings(plan.cfg, head), _card_use(plan, task)])


def _card_lead(plan, task: Task) -> str:
    train, dev = (None if n is None else Path(n).name for n in plan.names)
    made = "a fine-tuned version of" if isinstance(plan.backbone, Encoder) else "built on"
    held = f"`{dev}`" if dev else f"{plan.cfg.dev_fraction:.0%} of `{train}` held out"
    above = f" The card above is `{plan.model_name}`'s." \
        if plan.source_card and plan.source_card.strip() else ""
    return (f"This model is {made} `{plan.model_name}`, trained by `bertkit finetune` for the "
            f"`{task.name}` task on `{train}`.{above} It achieves the following results on the "
            f"evaluation set, {held} (`dev_metrics.json` holds them all):")


def _card_scores(final: dict) -> str:
    """The dev figures of dev_metrics.json (its top-level numbers), with the baseline's."""
    names = [k for k, v in final.items()
             if card_figure(k, v) is not None and k not in _NOT_SCORES]
    baseline = final.get("baseline") or {}
    if not baseline:
        return "\n".join(["| figure | dev |", "|---|---|",
                          *(f"| {k} | {card_figure(k, final[k])} |" for k in names)])
    predictor = baseline.get("predictor") or "a trivial predictor fitted on the training data"
    return "\n".join([f"| figure | dev | baseline ({predictor}) |", "|---|---|---|",
                      *(f"| {k} | {card_figure(k, final[k])} | "
                        f"{card_figure(k, baseline.get(k)) or ''} |" for k in names)])


def _card_settings(cfg, head: bool) -> str:
    """The training hyperparameters, as training_args.json records them; the head's learning
    rate where the model has a head of its own (`head`)."""
    head_lr = f" (the head's {cfg.head_lr:g})" if head else ""
    trained = None if cfg.train_layers is None else \
        "encoder frozen, the head alone trained" if cfg.train_layers == 0 else \
        f"encoder: its top {counted(cfg.train_layers, 'block')} trained"
    lines = [f"epochs: {cfg.epochs}" if cfg.epochs else None,
             f"time budget: {cfg.max_time:g} minutes" if cfg.max_time else None,
             f"learning rate: {cfg.lr:g}{head_lr}, {cfg.warmup:.0%} warm-up then linear decay, "
             f"weight decay {cfg.weight_decay:g}",
             f"batch size: {cfg.batch_size}", f"max length: {cfg.max_length} tokens",
             trained,
             "the head reads a learned mix of all layers" if cfg.layer_mix else None,
             f"seed: {cfg.seed}", f"precision: {cfg.precision}"]
    return "Training hyperparameters:\n\n" + "\n".join(f"- {line}" for line in lines if line)


def _card_use(plan, task: Task) -> str:
    """How to run the model: the command line and the Python call the README shows."""
    name = Path(plan.names[1] or plan.names[0]).name
    data = "examples.jsonl" if name.startswith("<") else name  # "<stdin>", "<rows>"
    shell, python = task.usage(str(plan.out_dir), data)
    return f"Use it:\n\n```bash\n{shell}\n```\n\n```python\n{python}\n```"


__all__ = ["CARD_TITLE", "card_section"]
