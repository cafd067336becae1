"""A fresh model: a randomly initialised BERT of a preset's shape, sized to a tokenizer.

The result is a complete model directory (weights, config.json and the tokenizer files) that
`transformers` loads as BertForPreTraining, ready for pretraining.
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from bertkit.config import ConfigError, EncoderConfig
from bertkit.config import preset as preset_config
from bertkit.files import UserError
from bertkit.model.hub import resolve_model, save_model
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.text.tokenizer import Tokenizer


def new_pretraining_model(config: EncoderConfig, seed: int) -> PretrainingModel:
    """A PretrainingModel initialised as BERT does from its own `torch.Generator` seeded with
    `seed`: the same weights every time, and torch's global generator neither used nor moved."""
    # Building the modules draws their default init from the global generator; fork it so the
    # caller's stream is left where it was (init_weights then overwrites every weight).
    with torch.random.fork_rng(devices=[]):
        model = PretrainingModel(config)
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
