"""A model directory at a glance: its config, and where its parameters sit.

Shapes are read from the weight file's header (safetensors) without loading the tensors, and
checked against the shapes the config implies, so an inconsistent directory is reported here
rather than halfway through a later command.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

from bertkit.files import UserError
from bertkit.config import EncoderConfig
from bertkit.model.hub import NAMES, load_config, names_for, our_name, to_hf_state_dict
from bertkit.model.heads import PretrainingModel
from bertkit.model.kind import ModelKind, require_kind
from bertkit.text.tokenizer import Tokenizer

# bertkit weight name -> the part of the model it belongs to.
_PARTS = [
    (r"embeddings\.(word|position|segment|norm)\.", r"embeddings.\1"),
    (r"project\.", "embeddings.project"),
    (r"blocks\.(\d+)\.(attn|attn_norm)\.", r"block.\1.attention"),
    (r"blocks\.(\d+)\.(up|down|ffn_norm)\.", r"block.\1.feed_forward"),
    (r"pooler\.", "pooler"),
    (r"final_norm\.", "final_norm"),
    (r"mlm\.", "head.mlm"),
    (r"nsp\.", "head.nsp"),
]
_ORDER = ["embeddings.word", "embeddings.position", "embeddings.segment", "embeddings.norm",
          "embeddings.project",
          "pooler", "final_norm", "head.mlm", "head.nsp"]

_SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
                       "I64": "int64", "I32": "int32"}


@dataclass
class ModelInfo:
    path: Path
    config: EncoderConfig
    parts: dict[str, int]
    """Parameter count per part, in model order: embeddings.word, ..., block.0.attention,
    block.0.feed_forward, ..., pooler or final_norm, head.mlm, head.nsp, head.<task>."""
    dtype: str
    """Storage dtype of the weights (the most common one)."""
    tokenizer: Tokenizer | None = field(default=None, repr=False)
    missing: list[str] = field(default_factory=list)
    """bertkit names of the pretraining weights the directory lacks (a head that loading
    initialises at random: `mlm.*` for an encoder-only checkpoint)."""

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def group(self, prefix: str) -> int:
        return sum(n for name, n in self.parts.items() if name.startswith(prefix))

    def to_dict(self) -> dict:
        tok = self.tokenizer
        return {"path": str(self.path), "config": self.config.to_hf(), "dtype": self.dtype,
                "parameters": {**self.parts, "embeddings": self.group("embeddings."),
                               "blocks": self.group("block."), "heads": self.group("head."),
                               "total": self.total},
                "tokenizer": None if tok is None else {
                    "kind": tok.kind, "vocab_size": tok.vocab_size,
                    "lowercase": tok.do_lower_case}}

    def format(self) -> str:
        """A readable table: config line, then parameters per part (identical blocks folded)."""
        c = self.config
        segments = c.type_vocab_size if c.architecture == "bert" else "none"
        lines = [f"{self.path}",
                 f"  layers {c.num_layers}, hidden {c.hidden_size}, heads {c.num_heads}, "
                 f"intermediate {c.intermediate_size}, vocab {c.vocab_size}, positions "
                 f"{c.max_positions}, segments {segments}, activation {c.activation}, "
                 f"weights {self.dtype}",
                 f"  architecture {c.architecture}" + (
                     f" (pre-LN, gated feed-forward, rotary positions, no biases"
                     f"{f', local window {c.local_window}' if c.local_window else ''})"
                     if c.architecture == "modern" else "")]
        if self.tokenizer is not None:
            t = self.tokenizer
            note = "" if t.vocab_size == c.vocab_size else \
                f"  (config says {c.vocab_size}: mismatch)"
            lines.append(f"  tokenizer {t.kind}, {t.vocab_size} tokens, "
                         f"{'uncased' if t.do_lower_case else 'cased'}{note}")
        rows = [("embeddings", self.group("embeddings."))]
        rows += [(f"  {name.split('.')[1]}", n) for name, n in self.parts.items()
                 if name.startswith("embeddings.")]
        blocks = [self.group(f"block.{i}.") for i in range(c.num_layers)]
        if blocks and len(set(blocks)) == 1:
            rows.append((f"blocks 0-{c.num_layers - 1} ({c.num_layers} x {blocks[0]:,})",
                         sum(blocks)))
            rows += [(f"  {kind} (each block)", self.parts[f"block.0.{kind}"])
                     for kind in ("attention", "feed_forward")]
        else:
            rows += [(f"block {i}", n) for i, n in enumerate(blocks)]
        rows += [(name.replace("head.", "head "), n) for name, n in self.parts.items()
                 if not name.startswith(("embeddings.", "block."))]
        rows.append(("total", self.total))
        width = max(len(name) for name, _ in rows) + 2
        lines += ["  parameters:"] + [f"    {name:<{width}}{n:>14,}" for name, n in rows]
        return "\n".join(lines)


def _weight_shapes(path: Path) -> tuple[dict[str, tuple[int, ...]], str]:
    """{Hugging Face name: shape} and the commonest dtype, without loading tensor data."""
    if (path / "model.safetensors").is_file():
        file = path / "model.safetensors"
        try:
            with safe_open(str(file), "pt") as f:
                slices = {k: f.get_slice(k) for k in f.keys()}
                shapes = {k: tuple(s.get_shape()) for k, s in slices.items()}
                dtypes = [_SAFETENSORS_DTYPES.get(s.get_dtype(), s.get_dtype().lower())
                          for s in slices.values()]
        except Exception as e:  # safetensors raises its own error types
            raise UserError(f"{file}: unreadable weights ({e})") from None
    elif (path / "pytorch_model.bin").is_file():
        file = path / "pytorch_model.bin"
        try:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:
            raise UserError(f"{file}: unreadable weights ({e})") from None
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        dtypes = [str(v.dtype).removeprefix("torch.") for v in state.values()]
    else:
        raise UserError(f"{path}: not a model directory (no model.safetensors or "
                        "pytorch_model.bin)")
    return shapes, max(set(dtypes), key=dtypes.count) if dtypes else "none"


def _hf_name(name: str, prefix: str) -> str:
    """A weight's name without the "bert." / "model." prefix and with the old gamma/beta
    LayerNorm names updated, as bare and task checkpoints share it."""
    name = name.removeprefix(prefix)
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                  re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def _part(name: str) -> str:
    for pattern, template in _PARTS:
        if (m := re.match(pattern, name)) is not None:
            return m.expand(template)
    return "head." + name.split(".")[0]  # a task head: classifier, qa_outputs, ...


def info(path: str | Path) -> ModelInfo:
    """Config and parameter counts per part of a model directory; raises UserError if the
    weights do not fit the config, or if it holds another kind of model (bertkit.model.kind). A
    model's name on the Hugging Face Hub is fetched into its cache (bertkit.model.fetch)."""
    path = require_kind(path, ModelKind.TASK, ModelKind.ENCODER, ModelKind.SPARSE)
    config = load_config(path)
    shapes, dtype = _weight_shapes(path)
    arch = names_for(config.architecture, list(shapes))  # "electra": BERT in ELECTRA's names
    prefix = NAMES[arch].prefix
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        expected = {_hf_name(k, prefix): tuple(v.shape) for k, v in to_hf_state_dict(
            PretrainingModel(config).state_dict(), prefix, arch).items()}
    weights = {_hf_name(name, prefix): shape for name, shape in shapes.items()
               if our_name(_hf_name(name, prefix), arch) is not None}
    parts: dict[str, int] = {}
    for name, shape in weights.items():
        if name in expected and expected[name] != shape:
            raise UserError(f"{path}: weight {name} has shape {shape}, config.json implies "
                            f"{expected[name]}")
        if re.match(r"(encoder\.layer|layers)\.\d+\.", name) and name not in expected:
            raise UserError(f"{path}: weight {name} does not fit config.json's "
                            f"{config.num_layers} layers")
        part = _part(our_name(name, arch))
        parts[part] = parts.get(part, 0) + int(torch.Size(shape).numel())
    missing = [n for n in expected if our_name(n, arch).startswith(("embeddings.", "blocks."))
               and n not in weights]
    if missing:
        raise UserError(f"{path}: encoder weights missing ({missing[0]}, ...): not a "
                        "checkpoint of config.json's shape")
    parts = dict(sorted(parts.items(), key=lambda kv: _sort_key(kv[0], _ORDER)))
    tokenizer = Tokenizer.load(path) if any(
        (path / f).is_file() for f in ("tokenizer.json", "vocab.txt")) else None
    absent = [our_name(n, arch) for n in expected if n not in weights]
    return ModelInfo(path, config, parts, dtype, tokenizer, absent)


def _sort_key(part: str, order: list[str]) -> tuple:
    if part.startswith("block."):
        _, i, kind = part.split(".")
        return (1, int(i), kind)
    if part in order:
        return (0 if part.startswith("embeddings.") else 2, order.index(part), "")
    return (3, 0, part)
