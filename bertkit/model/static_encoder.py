"""Static sentence vectors as an encoder: one vector per vocabulary entry, whatever the context,
in model2vec's directory layout, so that `model2vec.StaticModel.from_pretrained` and
sentence-transformers' `StaticEmbedding` load what bertkit writes, and bertkit reads what they
write when its tokenizer has BERT's special tokens.

The directory:

    model.safetensors  "embeddings" [V, D], one row per tokenizer id (model2vec may add
                       "mapping" [V] and "weights" [V]: row mapping[id], times weights[id])
    tokenizer.json     the teacher's tokenizer, without its [CLS] ... [SEP] template
    config.json        model_type "model2vec", normalize, max_length (None: no limit), ...
    modules.json       StaticEmbedding (+ Normalize): sentence-transformers' pipeline

`StaticEncoder.forward` has the encoder's signature and `hidden_states` (one layer, the
lookup), so bertkit.embeddings' Embedder takes the directory where it takes a BERT one; it pools
a sentence as model2vec does (`Embedder.known_pieces_only`). `bertkit static distill`
(bertkit.embeddings.distill_static) writes the directory.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import save_file
from torch import nn

from bertkit.files import UserError, atomic_dir, read_json
from bertkit.model.kind import (CONFIG_FILE, MODEL2VEC_TYPE, SENTENCE_MODULES_FILE, ModelKind,
                                require_kind)
from bertkit.text.tokenizer import Tokenizer

WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
VECTORS = "embeddings"
"""The tensor of the vectors in WEIGHTS_FILE, as model2vec names it."""
NO_LIMIT = 1_000_000
"""Tokens read of a text when config.json sets no max_length (model2vec's seq_length)."""
NORMALIZE_DIR = "1_Normalize"


@dataclass
class StaticConfig:
    """The shape of a static model, as the Embedder asks an encoder for it."""

    vocab_size: int
    """Rows of the table: one per tokenizer id."""
    hidden_size: int
    """Width of the vectors."""
    normalize: bool = True
    """Sentence vectors are scaled to unit length (config.json's normalize)."""
    max_positions: int = NO_LIMIT + 2
    """Longest input the Embedder hands over: max_length pieces and the [CLS] and [SEP] that
    bertkit's tokenizer puts around them (and pooling leaves out)."""
    num_layers: int = 0
    """Layers above the lookup: none, so layer 0 (= -1) is the only one."""
    num_heads: int = 0
    """Attention heads: none, so no attention to look at."""
    architecture: str = "static"
    """What the Embedder and the explorer call it."""


class StaticOutput(NamedTuple):
    last_hidden_state: torch.Tensor
    """[B, T, D] each piece's vector."""
    hidden_states: tuple[torch.Tensor, ...] | None
    """(last_hidden_state,) when asked for: the lookup is layer 0 and the last."""


class StaticEncoder(nn.Module):
    """A table of vectors behind the encoder's interface."""

    def __init__(self, config: StaticConfig, vectors: torch.Tensor):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding.from_pretrained(vectors.float(), freeze=True)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *,
                output_hidden_states: bool = False) -> StaticOutput:
        """The encoder's interface: input_ids [B, T] -> each piece's vector [B, T, D]; segment
        ids and the mask change nothing (a piece's vector has no context)."""
        x = self.embeddings(input_ids)
        return StaticOutput(x, (x,) if output_hidden_states else None)


def _read_vectors(path: Path) -> np.ndarray:
    """The [V, D] float32 table, a vocabulary-quantized one (mapping, weights) unfolded."""
    try:
        with safe_open(str(path), "np") as f:
            names = set(f.keys())
            if VECTORS not in names:
                raise UserError(f"{path}: no {VECTORS!r} tensor (holds {', '.join(sorted(names))})")
            vectors = f.get_tensor(VECTORS).astype(np.float32)
            if "mapping" in names:
                vectors = vectors[f.get_tensor("mapping").astype(np.int64)]
            if "weights" in names:
                vectors = vectors * f.get_tensor("weights").astype(np.float32)[:, None]
    except FileNotFoundError:
        raise UserError(f"{path}: weights missing") from None
    except UserError:
        raise
    except Exception as e:  # safetensors raises its own error types
        raise UserError(f"{path}: unreadable vectors ({e})") from None
    if vectors.ndim != 2:
        raise UserError(f"{path}: {VECTORS!r} has shape {vectors.shape}, expected [V, D]")
    return vectors


def load_static_encoder(path: str | Path, device: str | torch.device = "cpu") -> StaticEncoder:
    """The StaticEncoder of a static model directory (bertkit's or model2vec's layout)."""
    p = require_kind(path, ModelKind.STATIC_SENTENCE)
    config = read_json(p / CONFIG_FILE, "static model config")
    max_length = config.get("max_length")
    if max_length is not None and (isinstance(max_length, bool) or
                                   not isinstance(max_length, int) or max_length < 1):
        raise UserError(f"{p / CONFIG_FILE}: max_length should be a positive integer or "
                        f"null, not {max_length!r}")
    vectors = _read_vectors(p / WEIGHTS_FILE)
    shape = StaticConfig(vocab_size=vectors.shape[0], hidden_size=vectors.shape[1],
                         normalize=bool(config.get("normalize", False)),
                         max_positions=(max_length or NO_LIMIT) + 2)
    return StaticEncoder(shape, torch.from_numpy(vectors)).to(device).eval()


def load_static_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of a static model directory, as bertkit runs it (with BERT's template,
    which the Embedder's pooling then leaves out)."""
    p = Path(path)
    if not (p / TOKENIZER_FILE).is_file():
        raise UserError(f"{p}: no {TOKENIZER_FILE}: a static model reads text with the "
                        f"tokenizer it was made with")
    return Tokenizer.load(p)


def tokenizer_spec(tokenizer: Tokenizer, lowercase: bool = False) -> dict:
    """tokenizer.json as a static model keeps it: the pieces as `tokenizer` cuts them, without
    the template ([CLS] ... [SEP] would be pooled by model2vec's `encode` otherwise), padding
    or truncation; with `lowercase`, text lowercased first (a sentence-transformers teacher's
    do_lower_case, which no reader of the directory would know of otherwise)."""
    spec = json.loads(tokenizer.backend.to_str())
    spec["post_processor"] = spec["padding"] = spec["truncation"] = None
    if lowercase:
        rest = [spec["normalizer"]] if spec.get("normalizer") else []
        spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, *rest]}
    return spec


def sentence_modules(normalize: bool) -> list[dict]:
    """modules.json of a static model: sentence-transformers' StaticEmbedding over the
    directory itself, then Normalize when the vectors are normalized."""
    modules = [{"idx": 0, "name": "0", "path": ".",
                "type": "sentence_transformers.models.StaticEmbedding"}]
    if normalize:
        modules.append({"idx": 1, "name": "1", "path": NORMALIZE_DIR,
                        "type": "sentence_transformers.models.Normalize"})
    return modules


def save_static(out: str | Path, vectors: np.ndarray, tokenizer: Tokenizer, config: dict,
                extra_files: dict[str, str] | None = None, lowercase: bool = False) -> Path:
    """Write a static model directory at once (bertkit.files.atomic_dir): `vectors` [V, D]
    (one row per id of `tokenizer`), the tokenizer (`tokenizer_spec`), config.json (`config`
    under model2vec's fixed keys) and modules.json; `extra_files` (name -> text) beside
    them."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.shape[0] != tokenizer.vocab_size:
        raise ValueError(f"{vectors.shape[0]} vectors for {tokenizer.vocab_size} tokenizer ids")
    config = {"model_type": MODEL2VEC_TYPE, "architectures": ["StaticModel"], **config,
              "hidden_dim": int(vectors.shape[1]), "embedding_dtype": "float32"}
    files = {TOKENIZER_FILE: json.dumps(tokenizer_spec(tokenizer, lowercase),
                                        ensure_ascii=False),
             CONFIG_FILE: json.dumps(config, indent=2, ensure_ascii=False),
             SENTENCE_MODULES_FILE: json.dumps(sentence_modules(bool(config.get("normalize"))),
                                               indent=2),
             **(extra_files or {})}
    # Files a tokenizer or model directory had that would change how this one reads text
    # (tokenizer_config.json's flags rebuild the normalizer) go when it is written over.
    stale = ("tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
             "sentence_bert_config.json", "config_sentence_transformers.json")
    with atomic_dir(out, replaces=stale) as tmp:
        save_file({VECTORS: vectors}, str(tmp / WEIGHTS_FILE))
        for name, text in files.items():
            (tmp / name).write_text(text + "\n", encoding="utf-8")
        if config.get("normalize"):
            (tmp / NORMALIZE_DIR).mkdir()
    return Path(out)


__all__ = ["StaticConfig", "StaticEncoder", "StaticOutput", "load_static_encoder",
           "load_static_tokenizer", "save_static", "sentence_modules",
           "tokenizer_spec", "NO_LIMIT", "TOKENIZER_FILE", "VECTORS", "WEIGHTS_FILE"]
