"""Task-agnostic distillation beside the masked LM (`--objective distill --teacher DIR`): the
student learns the masked tokens and, from a pretrained teacher run on the same batch, the
self-attention relations of one of its layers (MiniLM v2, Wang et al. 2021) and/or its hidden
states (DistilBERT, Sanh et al. 2019), at the student's last layer. The losses are the pure
functions of `bertkit.pretraining.distillation`.

The teacher reads the student's tokens, so the data must have been prepared with its tokenizer
(`data_tokenizer`: a text --data is prepared with it, prepared data made with another is
refused). It is loaded once per process on first use, in eval mode without gradients, moved to
the batch's device and run under the run's autocast; it is no part of the model the loop
trains (nothing of it in a checkpoint, nothing for DDP to wrap), and a checkpoint records it by
its bytes, so that a run resumes only with the teacher it was trained with. A projection to
the teacher's width, where the hidden states are learned and the widths differ, is part of the
student (`PretrainingModel.to_teacher`): trained, checkpointed, not saved in the model
directory. What a user asks of the trained model: `bertkit fill-mask`."""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import torch
from torch import nn

from bertkit.config import EncoderConfig
from bertkit.files import UserError, sha256_file
from bertkit.model.encoder import Encoder
from bertkit.model.hub import load_config, load_encoder, load_pretraining_model
from bertkit.model.kind import CONFIG_FILE, ModelKind, require_kind
from bertkit.pretraining.distillation import (DistillSettings, check_widths, relation_kl,
                                              states_mse)
from bertkit.pretraining.objective import save_pretraining_model
from bertkit.pretraining.objectives.mlm import MaskedLM
from bertkit.pretraining.vocab_loss import decode_terms, mean_terms

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def layer_states(encoder: Encoder, batch: dict, layer: int):
    """((queries, keys, values), output) of block `layer` (from 0) of `encoder` on a batch:
    the attention's vectors as it uses them (rotary-turned, "modern"), its heads side by side,
    each [B, T, H], and the block's output [B, T, H] (the last block's after the final norm,
    as transformers' last hidden state). The blocks above it are not run."""
    ids = batch["input_ids"]
    x = encoder.embed(ids, batch.get("token_type_ids"))  # [B, T, H]
    inputs = encoder.layer_inputs(batch.get("attention_mask"), ids.shape[1], False, x.device)
    for block, (mask, rope) in zip(encoder.blocks[:layer], inputs[:layer]):
        x = block(x, mask, False, rope)
    block, (mask, rope) = encoder.blocks[layer], inputs[layer]
    qkv = block.attn.project(block.attn_norm(x) if block.pre_norm else x, rope)  # [B, A, T, D]
    x = block(x, mask, False, rope)
    if layer == len(encoder.blocks) - 1 and encoder.final_norm is not None:
        x = encoder.final_norm(x)
    B, T, _ = x.shape
    return tuple(t.transpose(1, 2).reshape(B, T, -1) for t in qkv), x


def teacher_identity(path: Path) -> str:
    """The teacher as a checkpoint records it: "DIR (sha256 DIGEST)", the digest of its
    config.json and weights, so that the same teacher elsewhere resumes and another is
    refused (`training.checkpoint` compares such values by their digest)."""
    digest = hashlib.sha256((path / CONFIG_FILE).read_bytes())
    weights = next((path / f for f in _WEIGHT_FILES if (path / f).is_file()), None)
    if weights is None:
        raise UserError(f"--teacher: {path}: no weights ({' or '.join(_WEIGHT_FILES)})")
    digest.update(sha256_file(weights).encode())
    return f"{path} (sha256 {digest.hexdigest()})"


class Distill(MaskedLM):
    name = "distill"
    summary = ("masked language model and a teacher's self-attention relations (MiniLM v2) "
               "and/or hidden states, the teacher given by --teacher DIR")
    Settings = DistillSettings

    def __init__(self, settings=None):
        super().__init__(settings)
        # found and loaded once, when first asked for (the run's checks, fitting the student):
        # a Hub name is fetched once, and objectives made only to be named load nothing
        self._dir: Path | None = None
        self._teacher: Encoder | None = None

    # The teacher ----------------------------------------------------------------------------
    def teacher_dir(self) -> Path:
        """The teacher's directory, a BERT-family encoder's (a Hub name fetched)."""
        if self.settings.teacher is None:
            raise UserError("--objective distill needs --teacher DIR: a pretrained BERT-family "
                            "encoder whose tokenizer the data was prepared with")
        if self._dir is None:
            try:
                self._dir = require_kind(self.settings.teacher, ModelKind.ENCODER)
            except UserError as e:
                raise UserError(f"--teacher: {e}") from None
        return self._dir

    def teacher_config(self) -> EncoderConfig:
        """The teacher's config, refused in one line where it is no BERT-family encoder's."""
        try:
            return load_config(self.teacher_dir())
        except UserError as e:
            raise UserError(f"--teacher: {e}") from None

    def teacher_layer(self, cfg: EncoderConfig) -> int:
        """The teacher's block (from 0) the student learns from."""
        layer = self.settings.teacher_layer or cfg.num_layers
        if layer > cfg.num_layers:
            raise UserError(f"--teacher-layer {layer}: the teacher has {cfg.num_layers} layers")
        return layer - 1

    def loaded_teacher(self) -> Encoder:
        """The teacher, in eval mode, without gradients: loaded once, where it was."""
        if self._teacher is None:
            self._teacher = load_encoder(self.teacher_dir()).requires_grad_(False).eval()
        return self._teacher

    def teacher(self, device: torch.device) -> Encoder:
        """The teacher on `device` (moved only where it is elsewhere: a compiled step sees no
        move)."""
        teacher = self.loaded_teacher()
        if teacher.embeddings.word.weight.device != device:
            teacher.to(device)
        return teacher

    def data_tokenizer(self) -> Path | None:
        return self.teacher_dir()

    def check_seq_len(self, seq_len: int) -> None:
        positions = self.teacher_config().max_positions
        if seq_len > positions:
            raise UserError(f"--seq-len {seq_len} is longer than the teacher's {positions} "
                            f"positions")

    # The model ------------------------------------------------------------------------------
    def _projection(self, cfg: EncoderConfig) -> nn.Linear | None:
        """A new projection of the student's states to the teacher's width, where they are
        learned and the widths differ; else None."""
        width = self.teacher_config().hidden_size
        if self.settings.hidden_weight == 0 or width == cfg.hidden_size:
            return None
        with torch.random.fork_rng(devices=[]):  # the module's default init draws globally
            return nn.Linear(cfg.hidden_size, width)

    def extra_heads(self, cfg) -> dict[str, nn.Module]:
        projection = self._projection(cfg)
        return {} if projection is None else {"to_teacher": projection}

    def saved_model(self, model_dir: Path, device) -> nn.Module:
        """The masked LM alone: the projection is never saved, and `evaluate` has no
        teacher."""
        return load_pretraining_model(model_dir, device)

    def flops(self, cfg):  # the teacher's forward beside the student's: not counted
        return None

    def fit(self, model: nn.Module, init: Path | None, seed: int) -> nn.Module:
        teacher = self.loaded_teacher().config  # loaded before the first step, checked
        self.teacher_layer(teacher)
        if self.settings.relation_weight > 0:
            check_widths(self.settings.relation_heads, {"student": model.config.hidden_size,
                                                        "teacher": teacher.hidden_size})
        return super().fit(model, init, seed)

    def check_model(self, model: nn.Module) -> None:
        super().check_model(model)
        if self.settings.teacher is None:
            raise UserError("the distill objective's held-out figures need its teacher "
                            "(pretrain --teacher DIR); evaluate with --objective mlm")

    # Training -------------------------------------------------------------------------------
    def _terms(self, model: nn.Module, batch: dict):
        """(MLM terms, {"relation": loss, "hidden": loss} of the losses weighed above 0)."""
        (sq, sk, sv), h = layer_states(model.encoder, batch, model.config.num_layers - 1)
        z = h.reshape(-1, h.shape[-1]).index_select(0, batch["mlm_positions"])  # [N, H]
        terms = decode_terms(model, z, batch["mlm_labels"])
        teacher = self.teacher(h.device)
        with torch.no_grad():
            (tq, tk, tv), th = layer_states(teacher, batch, self.teacher_layer(teacher.config))
        mask, s = batch.get("attention_mask"), self.settings
        taught = {}
        if s.relation_weight > 0:
            taught["relation"] = sum(relation_kl(a, b, s.relation_heads, mask)
                                     for a, b in ((sq, tq), (sk, tk), (sv, tv)))
        if s.hidden_weight > 0:
            taught["hidden"] = states_mse(h if model.to_teacher is None else model.to_teacher(h),
                                          th, mask)
        return terms, taught

    def _weights(self) -> dict[str, float]:
        return {"relation": self.settings.relation_weight, "hidden": self.settings.hidden_weight}

    def loss(self, model: nn.Module, batch: dict):
        terms, taught = self._terms(model, batch)
        mlm, metrics = mean_terms(terms, "mlm")
        weights = self._weights()
        loss = mlm + sum(weights[k] * v for k, v in taught.items())
        return loss, {**metrics, **{f"{k}_loss": v.detach() for k, v in taught.items()}}

    # Held-out figures -----------------------------------------------------------------------
    def held_out(self, model: nn.Module, batch: dict, add, judged: list):
        terms, taught = self._terms(model, batch)
        for name, value in taught.items():
            add(f"{name}_loss", value)
        add("distill_batches", torch.ones((), device=terms[2].device))
        return terms

    def figures(self, values: dict[str, float], judged: list) -> dict[str, float]:
        batches = max(values.get("distill_batches", 0.0), 1.0)
        return {f"eval_{k}_loss": values[f"{k}_loss"] / batches for k in self._weights()
                if f"{k}_loss" in values}

    # Saving and the run's record ------------------------------------------------------------
    def save(self, model: nn.Module, path: Path, tokenizer) -> None:
        save_pretraining_model(model, path, tokenizer,
                               leave_out=[*self.untrained_parts(model), "to_teacher"])

    def fingerprint(self) -> dict:
        settings = dataclasses.asdict(self.settings)
        del settings["teacher"]  # by its bytes, beside: the same teacher moved still resumes
        self.teacher_config()  # not a BERT-family encoder's: refused before its bytes are read
        return {self.settings_key(): settings, "teacher": teacher_identity(self.teacher_dir())}

    def describe(self, model: nn.Module) -> str | None:
        s, cfg = self.settings, self.teacher_config()
        learned = [f"self-attention relations in {s.relation_heads} heads (weight "
                   f"{s.relation_weight:g})"] if s.relation_weight > 0 else []
        if s.hidden_weight > 0:
            through = "" if model.to_teacher is None else ", through a learned projection"
            learned.append(f"hidden states (weight {s.hidden_weight:g}{through})")
        return (f"distill: teacher {s.teacher} ({cfg.num_layers} layers, hidden size "
                f"{cfg.hidden_size}); the student's last layer learns its layer "
                f"{self.teacher_layer(cfg) + 1}'s {' and '.join(learned)}")


__all__ = ["Distill", "layer_states", "teacher_identity"]
