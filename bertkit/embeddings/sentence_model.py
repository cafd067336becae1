"""The sentence-transformers layout of a model directory, read and written.

sentence-transformers describes a sentence model as a pipeline in `modules.json`:

- a Transformer: the encoder and its tokenizer (in the directory itself, or a subdirectory such
  as `0_Transformer/`), with `max_seq_length` and `do_lower_case` in `sentence_bert_config.json`;
- a Pooling (`1_Pooling/config.json`): how the token vectors become one sentence vector;
- optionally a Normalize: the sentence vector scaled to unit length.

bertkit reads that pipeline so that `Embedder.load(dir)` gives what `SentenceTransformer(dir)`
gives, and writes it so that a sentence model bertkit saves loads in sentence-transformers. A
pipeline with other modules (Dense, LayerNorm, ...) is refused rather than half-followed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from bertkit.files import UserError, read_json

MODULES_FILE = "modules.json"
CONFIG_FILE = "sentence_bert_config.json"

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
"""The Pooling modes sentence-transformers knows, all of which bertkit computes."""

# Older Pooling configs set one flag per mode; several set means the vectors side by side, in
# this order.
_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                  "pooling_mode_mean_tokens": "mean",
                  "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                  "pooling_mode_weightedmean_tokens": "weightedmean",
                  "pooling_mode_lasttoken": "lasttoken"}

# The class names modules.json gives (its module path moved between versions: compare the end).
_TRANSFORMER, _POOLING, _NORMALIZE = "Transformer", "Pooling", "Normalize"


@dataclass(frozen=True)
class SentenceModel:
    """What a sentence-transformers directory asks of the vectors it makes."""

    transformer: Path
    """The directory holding the encoder and its tokenizer."""
    pool: tuple[str, ...] = ("mean",)
    """Pooling modes; several give their vectors concatenated."""
    normalize: bool = False
    """A Normalize module follows the pooling."""
    max_seq_length: int | None = None
    """Inputs are cut to this many tokens; None: the model's maximum."""
    lowercase: bool = False
    """Texts are lowercased before tokenizing (`do_lower_case`)."""


def read_sentence_model(path: str | Path) -> SentenceModel | None:
    """The pipeline of a sentence-transformers directory; None when it has no modules.json."""
    path = Path(path)
    modules_file = path / MODULES_FILE
    if not modules_file.is_file():
        return None
    modules = read_json(modules_file, "sentence-transformers modules file")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise UserError(f"{modules_file}: expected a list of modules")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds not in ([_TRANSFORMER, _POOLING], [_TRANSFORMER, _POOLING, _NORMALIZE]):
        raise UserError(f"{modules_file}: modules {' -> '.join(kinds)}; bertkit follows "
                        f"Transformer -> Pooling (-> Normalize) only")
    transformer = path / str(modules[0].get("path", ""))
    pool = read_pooling(path / str(modules[1].get("path", "")) / "config.json")
    max_length, lowercase = None, False
    if (transformer / CONFIG_FILE).is_file():
        config = read_json(transformer / CONFIG_FILE, "sentence-transformers config")
        if not isinstance(config, dict):
            raise UserError(f"{transformer / CONFIG_FILE}: expected a JSON object")
        max_length = _positive_int(config.get("max_seq_length"), transformer / CONFIG_FILE,
                                   "max_seq_length")
        lowercase = bool(config.get("do_lower_case", False))
    if max_length is None and (transformer / "tokenizer_config.json").is_file():
        # newer sentence-transformers keep the limit only as the tokenizer's model_max_length
        limit = read_json(transformer / "tokenizer_config.json").get("model_max_length")
        if isinstance(limit, int) and 0 < limit < 10**9:
            max_length = limit
    return SentenceModel(transformer, pool, len(kinds) == 3, max_length, lowercase)


def read_pooling(path: Path) -> tuple[str, ...]:
    """The modes of a Pooling config: `pooling_mode` (a name or a list), or the older flags."""
    config = read_json(path, "sentence-transformers Pooling config")
    if not isinstance(config, dict):
        raise UserError(f"{path}: expected a JSON object")
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(m for flag, m in _POOLING_FLAGS.items() if config.get(flag)) or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode) if isinstance(mode, list) else ()
    bad = [m for m in modes if m not in POOLING_MODES]
    if not modes or bad:
        raise UserError(f"{path}: pooling mode {bad[0] if bad else mode!r} is not one of "
                        f"{', '.join(POOLING_MODES)}")
    return modes


def sentence_model_files(pool: tuple[str, ...], normalize: bool, max_seq_length: int,
                         hidden_size: int, lowercase: bool = False) -> dict[str, bytes]:
    """The files that make a model directory a sentence-transformers one, by name."""
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    flags = [m for m in _POOLING_FLAGS.values() if m in pool]
    if flags == list(pool):  # the older spelling, which every version reads without a warning
        pooling = {"word_embedding_dimension": hidden_size,
                   **{flag: m in pool for flag, m in _POOLING_FLAGS.items()}}
    else:  # modes in an order the flags cannot say
        pooling = {"embedding_dimension": hidden_size, "pooling_mode": list(pool)}
    files = {"1_Pooling/config.json": pooling,
             CONFIG_FILE: {"max_seq_length": max_seq_length, "do_lower_case": lowercase}}
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        files["2_Normalize/config.json"] = {}
    files[MODULES_FILE] = modules
    return {name: (json.dumps(obj, indent=2) + "\n").encode("utf-8")
            for name, obj in files.items()}


def pool_tokens(states: torch.Tensor, mask: torch.Tensor, modes: Sequence[str]) -> torch.Tensor:
    """[B, T, H] token vectors and their [B, T] mask (1 = a real token, padding at the end) ->
    [B, H * len(modes)]: each of sentence-transformers' pooling modes over the real tokens,
    [CLS] and [SEP] included, side by side."""
    keep = mask.unsqueeze(-1).to(states.dtype)  # [B, T, 1]
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(states[:, 0])
        elif mode == "lasttoken":
            last = (mask.sum(1) - 1).clamp(min=0)[:, None, None]  # [B, 1, 1]
            out.append(states.gather(1, last.expand(-1, 1, states.shape[-1])).squeeze(1))
        elif mode == "max":
            out.append(states.masked_fill(keep == 0, float("-inf")).amax(1))
        elif mode == "weightedmean":  # the i-th real token weighs i (from 1)
            weights = (mask.cumsum(1) * mask).unsqueeze(-1).to(states.dtype)
            out.append((states * weights).sum(1) / weights.sum(1))
        elif mode == "mean":
            out.append((states * keep).sum(1) / keep.sum(1))
        elif mode == "mean_sqrt_len_tokens":
            out.append((states * keep).sum(1) / keep.sum(1).sqrt())
        else:
            raise ValueError(f"pooling mode {mode!r} is not one of sentence-transformers'")
    return out[0] if len(out) == 1 else torch.cat(out, dim=-1)


def _positive_int(value, where: Path, key: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


__all__ = ["SentenceModel", "read_sentence_model", "read_pooling", "sentence_model_files",
           "pool_tokens",
           "POOLING_MODES", "MODULES_FILE", "CONFIG_FILE"]
