"""What every pretraining objective is: the `Objective` class, whose methods are the steps of a
run that differ from one objective to another, and the shape of the examples it reads.

    examples     how the text is cut into rows and which targets a batch carries
    extra_heads  its own heads beside the Hugging Face ones, given to the model's constructor;
                 extra_state: their weights as a directory it saved keeps them
    fresh_model  a model of a fresh config, initialised from a seed;  loaded_model: --init's
    fit          the model made ready for this objective (its new heads drawn from the run's
                 seed, unused heads frozen)
    loss         one batch's (loss, metrics);  target_count: the tokens it predicts
    flops        a batch's training FLOPs, for the run's MFU (none: not counted)
    held_out     one held-out batch's terms;  figures: the objective's own held-out figures
    untrained_parts  what is left at its initial draw and so not saved
    save         the trained model written;  saved_model: a saved directory's, as it scores it
    fingerprint  what a checkpoint must have been trained with to be resumed
    data_tokenizer  a model whose tokenizer the data must be prepared with (a teacher's)
    check_seq_len   rows too long for a part beside the model (a teacher's positions) refused
    describe     the line the run prints about it; pipeline_tag: its card's
    query        how a user asks the trained model what it learned

The recipe, the batches and `evaluate` call these and never ask which objective they hold;
the objectives themselves are listed once, in `bertkit.pretraining.objectives.OBJECTIVES`.
The base class is the masked language model of RoBERTa (packed rows, no next sentence): an
objective overrides what it does otherwise, and may wrap another and add a loss.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Literal

import torch
from torch import nn

from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.create import new_pretraining_model
from bertkit.model.encoder import init_weights
from bertkit.model.flops import model_flops_per_token
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel
from bertkit.training.run_state import num_tokens
from bertkit.model.hub import load_config, load_pretraining_model, save_model

Rows = Literal["packed", "documents", "pairs"]
Targets = Literal["masked", "spans", "next-token"]


@dataclass(frozen=True)
class ExampleShape:
    """How `examples.PretrainingBatches` cuts the text and what targets it draws."""
    rows: Rows = "packed"
    """"packed": rows cut from the documents back to back (RoBERTa); "documents": each row
    from one document (SpanBERT); "pairs": two segments, the second following or random
    (BERT's next-sentence pairs)."""
    targets: Targets = "masked"
    """"masked": masked tokens (mlm_positions, mlm_labels); "spans": masked spans with their
    boundaries (span_left, span_right, span_offset); "next-token": clm_labels."""
    replacement_draws: bool = False
    """One uniform number per masked token (sample_uniform): ELECTRA's generator samples."""


Add = Callable[[str, torch.Tensor], None]


class Objective:
    """A pretraining objective; see the module docstring. An instance holds its settings
    (`Settings`, a dataclass whose fields are the objective's own flags, or None)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    """What `--objective NAME` does, for the help."""
    examples: ClassVar[ExampleShape] = ExampleShape()
    Settings: ClassVar[type | None] = None
    pipeline_tag: ClassVar[str | None] = "fill-mask"
    """The Hugging Face pipeline its saved model serves (the card's front matter)."""
    masks: ClassVar[bool] = True
    """Whether it masks tokens (a masking rate to report)."""
    label_key: ClassVar[str] = "mlm_labels"
    """The batch's targets, counted to weigh micro-batches and ranks."""
    query: ClassVar[str] = 'bertkit fill-mask --model {model} "The cat sat on the [MASK]."'
    """How a user asks the trained model what it learned (its card shows it): a command
    line, {model} the model's directory."""

    def __init__(self, settings=None):
        self.settings = settings if settings is not None or self.Settings is None \
            else self.Settings()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r})"

    # The model ----------------------------------------------------------------------------
    def extra_heads(self, cfg: EncoderConfig) -> dict[str, nn.Module]:
        """Its own heads beside the Hugging Face ones, given to the model's constructor
        (`PretrainingModel`'s `sbo`, `to_teacher`); none by default."""
        return {}

    def extra_state(self, model_dir: Path) -> dict[str, torch.Tensor]:
        """Their weights, as a directory it saved keeps them beside the Hugging Face ones
        (model names: "sbo.…"); none: drawn afresh."""
        return {}

    def _heads(self, cfg: EncoderConfig) -> dict[str, nn.Module]:
        with torch.random.fork_rng(devices=[]):  # the modules' default init draws globally
            return self.extra_heads(cfg)

    def fresh_model(self, cfg: EncoderConfig, seed: int) -> nn.Module:
        """A fresh model of `cfg` initialised from `seed`, every weight at its first draw."""
        model = new_pretraining_model(cfg, seed, self._heads(cfg))
        model.not_loaded = frozenset(model.state_dict())  # all of it at its initial draw
        return model

    def loaded_model(self, init: Path) -> nn.Module:
        """The model of the directory --init names."""
        with torch.random.fork_rng(devices=[]):  # heads the directory lacks draw globally
            return load_pretraining_model(init, extra=self._heads(load_config(init)),
                                          extra_state=self.extra_state(init))

    def skeleton(self, cfg: EncoderConfig | None, init: Path | None) -> nn.Module | None:
        """The modules of the model `fresh_model` (of `cfg`) or `loaded_model` (of `init`)
        and `fit` make, for their shapes only (the caller builds it on the meta device);
        None where they are not known without the weights."""
        cfg = cfg if init is None else load_config(init)
        return PretrainingModel(cfg, **self._heads(cfg))

    def fit(self, model: nn.Module, init: Path | None, seed: int) -> nn.Module:
        """`model` ready to train: its own heads that no directory gave drawn from the run's
        seed (a generator of their own, apart from the rest's draws); heads it never reads
        get no gradient (DDP needs every trained weight used)."""
        for name in self._heads(model.config):
            if any(k.startswith(f"{name}.") for k in model.not_loaded):
                init_weights(model.get_submodule(name), model.config,
                             torch.Generator().manual_seed(seed))
        for head in (model.nsp, model.encoder.pooler):
            if head is not None:
                head.requires_grad_(False)
        return model

    def saved_model(self, model_dir: Path, device) -> nn.Module:
        """A saved directory's model as `evaluate` scores it with this objective, with the
        parts of it that live beside the Hugging Face weights."""
        return load_pretraining_model(model_dir, device,
                                      extra=self._heads(load_config(model_dir)),
                                      extra_state=self.extra_state(model_dir))

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model this objective cannot score (`evaluate`'s held-out figures)."""
        if not isinstance(model, PretrainingModel):
            raise UserError("held-out figures of an ELECTRA directory (a discriminator with "
                            "its generator/) are the electra objective's, and only theirs")

    # Training -----------------------------------------------------------------------------
    def loss(self, model: nn.Module, batch: dict):
        """(scalar loss, {name: scalar tensor}) of one batch."""
        raise NotImplementedError

    def target_count(self, batch: dict) -> torch.Tensor:
        """Number of predicted tokens in a batch, to weigh micro-batches and ranks exactly."""
        return (batch[self.label_key] != IGNORE_INDEX).sum()

    def flops(self, cfg: EncoderConfig) -> Callable[[dict], float] | None:
        """The training FLOPs of the model of `cfg` on a batch, for the run's model FLOP
        utilisation: the encoder on every token and the LM head on the tokens it predicts
        (`model.flops`), the small heads beside it not counted. None: not counted, where the
        objective runs more than that (ELECTRA's generator, a teacher)."""
        return functools.partial(lm_batch_flops, cfg, self.label_key)

    # Held-out figures ---------------------------------------------------------------------
    def held_out(self, model: nn.Module, batch: dict, add: Add, judged: list):
        """One held-out batch: its LM terms (summed loss, correct, count); the objective's
        other sums go to `add`, per-token judgements to `judged`."""
        raise NotImplementedError

    def figures(self, values: dict[str, float], judged: list) -> dict[str, float]:
        """The objective's own held-out figures from the sums `held_out` added."""
        return {}

    # Saving -------------------------------------------------------------------------------
    def untrained_parts(self, model: nn.Module) -> list[str]:
        """The heads ("nsp", "encoder.pooler") a run does not save: those at their initial
        draw (a fresh model's; those the --init directory lacked) that it does not train.
        Saved, their random weights would load in BertForPreTraining as if learned."""
        heads = {"nsp": model.nsp, "encoder.pooler": model.encoder.pooler}
        return [name for name, head in heads.items() if head is not None
                and any(f"{name}.{k}" in model.not_loaded for k in head.state_dict())]

    def save(self, model: nn.Module, path: Path, tokenizer) -> None:
        """The trained model as a Hugging Face directory, less `untrained_parts`: a BERT
        without NSP and pooler as BertForMaskedLM."""
        save_pretraining_model(model, path, tokenizer, leave_out=self.untrained_parts(model))

    # The run's record ---------------------------------------------------------------------
    def fingerprint(self) -> dict:
        """What of its settings a checkpoint must share to be resumed (beside its name): all
        of them."""
        if self.settings is None:
            return {}
        return {self.settings_key(): dataclasses.asdict(self.settings)}

    def describe(self, model: nn.Module) -> str | None:
        """A line on what the run trains, beside the model's (none: nothing more)."""
        return None

    def check_seq_len(self, seq_len: int) -> None:
        """Refuse rows of `seq_len` tokens that a part of the objective other than the model
        cannot read (a teacher's positions); none: every length the model reads."""

    def data_tokenizer(self) -> Path | None:
        """A model directory whose tokenizer the run's data must have been prepared with (a
        text --data is prepared with it where neither --tokenizer nor --init is given); None:
        any."""
        return None

    @classmethod
    def settings_key(cls) -> str:
        """Where its settings are kept: the field of the pretraining options, the --config
        table, the checkpoint's fingerprint entry (its name, as an identifier)."""
        return cls.name.replace("+", "_").replace("-", "_")


def lm_batch_flops(cfg: EncoderConfig, label_key: str, batch: dict) -> float:
    """Training FLOPs of an encoder of `cfg` and its LM head on `batch` (CPU tensors): its
    tokens times `model_flops_per_token` at its rows' length, the head paid at the tokens
    whose `label_key` label is set."""
    tokens = num_tokens(batch)
    predicted = int((batch[label_key] != IGNORE_INDEX).sum())
    return tokens * model_flops_per_token(cfg, batch["input_ids"].shape[1],
                                          predicted / max(tokens, 1))


def save_pretraining_model(model: PretrainingModel, path: Path, tokenizer, *,
                           leave_out: list[str] = (), causal: bool = False,
                           extra_files: dict[str, bytes] | None = None) -> None:
    """A PretrainingModel as a Hugging Face directory, the modules in `leave_out` not saved
    (a BERT without NSP and pooler as the transformers class that has neither:
    BertForMaskedLM, BertLMHeadModel if `causal`); `causal` also writes `"is_decoder":
    true`, what `bertkit generate` asks for."""
    headless = model.nsp is not None and {"nsp", "encoder.pooler"} <= set(leave_out)
    save_model(model, path, tokenizer=tokenizer, extra_files=extra_files,
               leave_out=["sbo", *leave_out],
               architectures=[("BertLMHeadModel" if causal else "BertForMaskedLM")]
               if headless else None,
               extra_config={"is_decoder": True} if causal else None)


__all__ = ["Objective", "ExampleShape", "Rows", "Targets", "lm_batch_flops",
           "save_pretraining_model"]
