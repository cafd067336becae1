"""A sparse (SPLADE) encoder as one ONNX graph: tokenized text in, its vector over the vocabulary
out.

`export_sparse` writes a SparseEncoder directory (`bertkit finetune sparse`, or
sentence-transformers') as the graph

    input_ids, [token_type_ids,] attention_mask -> sparse_embedding [B, V]

the masked-LM logits and SPLADE-max inside it: max over real tokens of log(1 + relu(logit)),
the attention mask applied in the graph (padding never contributes), as
`bertkit.embeddings.sparse.splade_pool` computes it. The vector is dense in the graph (an
inverted index takes its non-zero entries). It is checked against `SparseEncoder.encode` on
a padded batch of other texts than the traced ones.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bertkit.embeddings.sparse import SpladeModel, new_model
from bertkit.embeddings.sparse_encoder import SparseEncoder
from bertkit.export.graph import (OPSET, ExportResult, onnx_modules, onnx_session,
                                  quantize_model, run_session, write_graph)
from bertkit.export.sentence import padded_batch
from bertkit.files import UserError
from bertkit.model.encoder import Encoder
from bertkit.model.kind import ModelKind, require_kind

OUTPUT = "sparse_embedding"
_TRACE_TEXTS = ("What is a river bank?",
                "The bank raised its interest rates for the second time this year, and the "
                "savers who kept their money there were glad of it.")
_CHECK_TEXTS = ("rates", "A boat drifts down the river past the old stone bridge.",
                "Who wrote the first dictionary of the English language, and in which year "
                "was it published in London?")


class SparseGraph(nn.Module):
    """What is traced: a SPLADE model on named inputs (token_type_ids where it has segments)."""

    def __init__(self, model: SpladeModel, segments: bool):
        super().__init__()
        self.model, self.segments = model, segments

    def forward(self, input_ids, *rest):
        token_type_ids, attention_mask = rest if self.segments else (None, rest[0])
        return self.model(input_ids, token_type_ids, attention_mask)


def _reference_path(encoder: SparseEncoder) -> SpladeModel:
    """The encoder's weights on the reference encoder (`fast=False`): the mask applied in every
    case, so that the traced graph keeps it."""
    cfg = encoder.model.encoder.config
    with torch.random.fork_rng(devices=[]):  # the draws of a module about to be overwritten
        model = new_model(Encoder(cfg, fast=False))
    model.load_state_dict(encoder.model.state_dict())
    return model.eval()


def _batch(encoder: SparseEncoder, texts, cut_last: bool = False) -> dict[str, np.ndarray]:
    encoded = list(encoder.tokenizer.encode_batch(list(texts), None,
                                                  max_length=encoder.max_seq_length,
                                                  truncation=True, with_offsets=False))
    if cut_last and len(encoded[0].ids) >= len(encoded[-1].ids):  # keep the batch padded
        encoded[0] = dataclasses.replace(encoded[0], ids=encoded[0].ids[:-1],
                                         type_ids=encoded[0].type_ids[:-1])
    return padded_batch(encoded)


def max_difference(encoder: SparseEncoder, session) -> float:
    """Largest |onnx - SparseEncoder.encode| over a padded batch of other texts."""
    want = encoder.encode(list(_CHECK_TEXTS), convert_to_sparse_tensor=False).numpy()
    got, = run_session(session, _batch(encoder, _CHECK_TEXTS))
    return float(np.abs(got - want).max())


def export_sparse(model: str | Path, out: str | Path, *, quantize: bool = False,
                  dev: str | Path | None = None, opset: int = OPSET) -> ExportResult:
    """Write the sparse encoder at `model` as a graph at `out` (see the module docstring)."""
    onnx_modules()
    path, out = require_kind(model, ModelKind.SPARSE), Path(out)
    if dev is not None:
        raise UserError(f"--dev scores a fine-tuned or sentence model; {path} is a sparse "
                        f"encoder (bertkit evaluate scores it)")
    encoder = SparseEncoder.load(path)
    segments = encoder.model.encoder.config.architecture == "bert"
    graph = SparseGraph(_reference_path(encoder), segments).eval()
    inputs = {k: torch.from_numpy(v) for k, v in _batch(encoder, _TRACE_TEXTS, True).items()
              if segments or k != "token_type_ids"}
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs} | {OUTPUT: {0: "batch"}}
    write_graph(graph, inputs, [OUTPUT], axes, out, opset)
    result = ExportResult(out, "sparse", list(inputs), [OUTPUT],
                          max_difference(encoder, onnx_session(out)),
                          detail="SPLADE-max over the vocabulary")
    if quantize:
        result.quantized = quantize_model(out, per_channel=True)
    return result


__all__ = ["export_sparse", "SparseGraph", "OUTPUT"]
