"""ELECTRA (Clark et al. 2020): a small masked-LM generator fills the masked positions with its
samples, and the discriminator tells every token as original or replaced (the pure functions
are `bertkit.pretraining.electra`'s). Saved as the discriminator at the top and its generator
in OUT/generator (`hub.save_electra`). What a user asks of the trained model: which tokens of a
text look replaced (`bertkit.model.detect`), and fill-mask of its generator."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from bertkit.files import UserError
from bertkit.model.encoder import init_weights, num_parameters
from bertkit.model.heads import ElectraModel, generator_config
from bertkit.model.hub import (GENERATOR_DIR, has_detector, is_electra_dir, is_model_dir,
                               load_config, load_electra, save_electra)
from bertkit.pretraining import electra
from bertkit.pretraining.electra import ElectraSettings
from bertkit.pretraining.objective import ExampleShape, Objective
from bertkit.pretraining.vocab_loss import logit_terms, mean_terms, mlm_forward


def _electra_forward(model: nn.Module, batch: dict):
    """(generator terms, discriminator terms, its logits [B, T], replaced [B, T]) of an
    `ElectraModel` on a batch with `sample_uniform`."""
    generator, labels = model.generator, batch["mlm_labels"]
    z, _ = mlm_forward(generator, batch)
    logits = generator.mlm(z).float()  # [N, V]: the sample needs them, not only the loss
    sampled = electra.sample_tokens(logits, batch["sample_uniform"])
    ids, replaced = electra.corrupt(batch["input_ids"], batch["mlm_positions"], labels, sampled)
    detected = model(ids, batch.get("token_type_ids"), batch.get("attention_mask"),
                     batch.get("document_ids"))  # [B, T]
    terms = electra.detection_terms(detected, replaced, batch.get("attention_mask"))
    return logit_terms(logits, labels), terms, detected, replaced


def electra_loss(model: nn.Module, batch: dict,
                 detection_weight: float = electra.DETECTION_WEIGHT):
    """ELECTRA: the generator's masked-LM loss + detection_weight x the discriminator's
    replaced-token loss over every non-padding token."""
    mlm_terms, detection, _, replaced = _electra_forward(model, batch)
    mlm, metrics = mean_terms(mlm_terms, "mlm")
    rtd, rtd_metrics = mean_terms(detection, "detection")
    share = replaced.sum() / detection[2].clamp(min=1)
    return mlm + detection_weight * rtd, {**metrics, **rtd_metrics, "replaced_share": share}


class Electra(Objective):
    name = "electra"
    summary = ("replaced-token detection: a small generator and the discriminator, saved at "
               "the top, with the generator in OUT/generator")
    examples = ExampleShape(replacement_draws=True)
    Settings = ElectraSettings
    pipeline_tag = None  # transformers has no pipeline for a discriminator
    query = 'bertkit detect --model {model} "The cat ate on the mat."'

    def fresh_model(self, cfg, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):  # the modules' default init draws globally
            model = ElectraModel(cfg, generator_config(cfg, self.settings.generator_fraction))
        init_weights(model, cfg, torch.Generator().manual_seed(seed))
        return model

    def loaded_model(self, init: Path) -> nn.Module:
        if not is_model_dir(init / GENERATOR_DIR):
            raise UserError(f"{init}: --objective electra continues an ELECTRA run "
                            f"directory, which holds its generator in {GENERATOR_DIR}/")
        with torch.random.fork_rng(devices=[]):
            return load_electra(init).train()

    def skeleton(self, cfg, init: Path | None) -> nn.Module | None:
        if init is None:
            return ElectraModel(cfg, generator_config(cfg, self.settings.generator_fraction))
        if not (is_electra_dir(init) and has_detector(init)):
            return None
        return ElectraModel(load_config(init), load_config(init / GENERATOR_DIR))

    def flops(self, cfg):  # the generator's FLOPs beside the discriminator's: not counted
        return None

    def fit(self, model: nn.Module, init: Path | None, seed: int) -> nn.Module:
        return model

    def check_model(self, model: nn.Module) -> None:
        if not isinstance(model, ElectraModel):
            raise UserError("held-out figures of an ELECTRA directory (a discriminator with "
                            "its generator/) are the electra objective's, and only theirs")

    def loss(self, model: nn.Module, batch: dict):
        return electra_loss(model, batch, self.settings.detection_weight)

    def held_out(self, model: nn.Module, batch: dict, add, judged: list):
        terms, detection, detected, replaced = _electra_forward(model, batch)
        for name, value in zip(("detection_loss", "detection_correct", "detection_count"),
                               detection):
            add(name, value)
        add("replaced", replaced.sum())
        real = (torch.ones_like(replaced) if batch.get("attention_mask") is None
                else batch["attention_mask"].bool())
        judged.append((detected[real].float().cpu(), replaced[real].cpu()))
        return terms

    def figures(self, values: dict[str, float], judged: list) -> dict[str, float]:
        tokens = max(values["detection_count"], 1.0)
        return dict(eval_detection_loss=values["detection_loss"] / tokens,
                    eval_detection_accuracy=values["detection_correct"] / tokens,
                    eval_detection_auc=electra.auc(torch.cat([s for s, _ in judged]),
                                                   torch.cat([r for _, r in judged])),
                    eval_replaced_share=values["replaced"] / tokens)

    def untrained_parts(self, model: nn.Module) -> list[str]:
        return []

    def save(self, model: nn.Module, path: Path, tokenizer) -> None:
        save_electra(model, path, tokenizer=tokenizer)

    def describe(self, model: nn.Module) -> str | None:
        g = model.generator.config
        blocks = num_parameters(model.generator.encoder.blocks) / 1e6
        return (f"electra: generator of hidden size {g.hidden_size}, {g.num_heads} head(s), "
                f"feed-forward {g.intermediate_size} ({blocks:.1f}M block parameters), "
                f"detection loss weight {self.settings.detection_weight:g}")


__all__ = ["Electra", "electra_loss"]
