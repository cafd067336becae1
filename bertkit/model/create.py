"""A fresh model: a randomly initialised BERT of a preset's shape, sized to a tokenizer.

The result is a complete model directory (weights, config.json and the tokenizer files) that
`transformers` loads as BertForPreTraining, ready for pretraining.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from bertkit.config import PRESETS, Architecture, ConfigError, EncoderConfig
from bertkit.config import preset as preset_config
from bertkit.files import UserError
from bertkit.model.hub import resolve_model, save_model
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.text.tokenizer import Tokenizer


def new_pretraining_model(config: EncoderConfig, seed: int,
                          extra: dict[str, nn.Module] | None = None) -> PretrainingModel:
    """A PretrainingModel initialised as BERT does from its own `torch.Generator` seeded with
    `seed`: the same weights every time, and torch's global generator neither used nor moved.
    `extra`: the optional heads given to its constructor (`sbo`, `to_teacher`), drawn last,
    so that the rest is drawn as without them."""
    # Building the modules draws their default init from the global generator; fork it so the
    # caller's stream is left where it was (init_weights then overwrites every weight).
    with torch.random.fork_rng(devices=[]):
        model = PretrainingModel(config, **(extra or {}))
    init_weights(model, config, torch.Generator().manual_seed(seed))
    return model


def init_model(preset: str, tokenizer: str | Path | Tokenizer, out: str | Path, seed: int = 0,
               **overrides) -> PretrainingModel:
    """Build `preset` (tiny, mini, small, medium, base, large) with the vocabulary size and
    [PAD] id of `tokenizer` (a directory or a loaded Tokenizer), initialise it as BERT does
    from `seed`, and save it with the tokenizer to `out`. `overrides` set other EncoderConfig
    fields, e.g. max_positions=128."""
    tok = tokenizer if isinstance(tokenizer, Tokenizer) \
        else Tokenizer.load(resolve_model(tokenizer))  # a directory, or a cached model's name
    for name, ours in (("vocab_size", tok.vocab_size), ("pad_token_id", tok.pad_id)):
        if overrides.get(name, ours) != ours:
            raise UserError(f"{name}={overrides[name]} contradicts the tokenizer's {ours}")
        overrides[name] = ours
    try:
        config = preset_config(preset, **overrides)
    except (ConfigError, TypeError) as e:  # TypeError: an override that is not a config field
        raise UserError(f"preset {preset}: {e}") from None
    model = new_pretraining_model(config, seed)
    tok = copy.copy(tok)  # the caller's tokenizer keeps its own model_max_length
    tok.model_max_length = config.max_positions
    save_model(model, out, tokenizer=tok)
    return model.eval()


GLOBAL_EVERY = 3
"""How often a layer attends globally when only a window is given: ModernBERT's every third."""


def local_attention_fields(architecture: str, local_window: int | None,
                           global_every: int | None) -> dict:
    """The EncoderConfig fields that --local-window and --global-every of a fresh model set
    (`init`, `pretrain`): {} when neither is given, else local_window and global_every
    (GLOBAL_EVERY when not given). A UserError when "bert" is asked for a window (it attends to
    the whole input in every layer), for a window that is not a positive even number of tokens
    (the band reaches window // 2 either side), or for --global-every alone."""
    if local_window is None and global_every is None:
        return {}
    if architecture != "modern":
        raise UserError(f"--local-window and --global-every are for --architecture modern; "
                        f"{architecture} attends to the whole input in every layer")
    if local_window is None:
        raise UserError("--global-every needs --local-window: without a window every layer "
                        "attends to the whole input")
    if isinstance(local_window, bool) or not isinstance(local_window, int) \
            or local_window <= 0 or local_window % 2:
        raise UserError(f"--local-window must be a positive even number of tokens (half of it "
                        f"either side), got {local_window}")
    if global_every is not None and (isinstance(global_every, bool)
                                     or not isinstance(global_every, int) or global_every <= 0):
        raise UserError(f"--global-every must be a positive integer, got {global_every}")
    return dict(local_window=local_window, global_every=global_every or GLOBAL_EVERY)


@dataclass(kw_only=True)
class InitOptions:
    """The settings of a fresh model (`bertkit init`): its preset, shape and seed."""

    preset: str = field(metadata={"choices": tuple(PRESETS)})
    """Model size, layers and width: tiny (2 layers, 128 wide), mini (4, 256), small (4, 512),
    medium (8, 512), base (12, 768: BERT-base), large (24, 1024: BERT-large)."""
    tokenizer: Path = field(metadata={"model": True})
    """Tokenizer (or model) directory: the vocabulary size and [PAD] id."""
    out: Path = field(metadata={"output": "directory"})
    """Directory for the model and its tokenizer."""
    seed: int = 0
    """Seeds the weight initialisation."""
    max_positions: int | None = None
    """Longest input in tokens; none: the preset's (512)."""
    architecture: Architecture = "modern"
    """"modern" (pre-LN, gated feed-forward, rotary positions, no biases; saved as
    ModernBertForMaskedLM) or "bert" (BERT as published; BertForPreTraining): the same
    choice and default as `pretrain --architecture`."""
    local_window: int | None = None
    """"modern": ModernBERT's local attention, a window of this many tokens (a positive
    even number; ModernBERT's is 128): the layers that are not global see only the tokens
    within half of it either side; none: every layer attends to the whole input."""
    global_every: int | None = None
    """With --local-window: every n-th layer, from the first, attends to the whole input;
    none: 3, as ModernBERT."""
    num_layers: int | None = None
    """Transformer blocks; none: the preset's."""
    hidden_size: int | None = None
    """Width of the token vectors; none: the preset's."""
    num_heads: int | None = None
    """Attention heads (--hidden-size must be a multiple); none: the preset's."""
    intermediate_size: int | None = None
    """Feed-forward width; none: the preset's ("modern": about 8/3 of --hidden-size)."""

    def __post_init__(self) -> None:
        local_attention_fields(self.architecture, self.local_window, self.global_every)

    def create(self) -> PretrainingModel:
        """The fresh model these settings describe, saved with its tokenizer to `out`."""
        shape = {k: getattr(self, k) for k in _SHAPE if getattr(self, k) is not None}
        window = local_attention_fields(self.architecture, self.local_window, self.global_every)
        return init_model(self.preset, self.tokenizer, self.out, seed=self.seed,
                          architecture=self.architecture, **shape, **window)


_SHAPE = ("max_positions", "num_layers", "hidden_size", "num_heads", "intermediate_size")
