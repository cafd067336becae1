"""A sentence model as one ONNX graph: text in (through `OnnxEmbedder`), the sentence vector out.

`export_sentence` writes a sentence-transformers directory (Transformer -> Pooling (->
Normalize)), or a plain encoder with mean pooling as `Embedder.load` reads it, as the graph

    input_ids, [token_type_ids,] attention_mask -> sentence_embedding [B, D]

with dynamic batch and sequence axes: the encoder, every pooling mode the directory names
computed from the attention mask (several side by side, in the directory's order), and the L2
normalisation when there is a Normalize module. The graph's file records what the tokenizer
in front of it must do (maximum length, lowercasing), so that

    OnnxEmbedder.load("m.onnx", "m/").encode(texts)

gives what `Embedder.load("m/").encode(texts)` gives, with onnxruntime and no torch model.

The pooling here reads a padded batch and its mask, which a graph with dynamic shapes needs;
the Embedder pools flat lists of positions (`bertkit.embeddings.batch_tasks.reduce_rows`).
Each export checks the one against the other on a padded batch (`ExportResult.max_abs_diff`).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.inputs import Encoded, Text, plan_batches, tokenize_texts
from bertkit.embeddings.sentence_model import pool_tokens, read_sentence_model
from bertkit.export.graph import (OPSET, ExportResult, onnx_modules, onnx_session,
                                  quantize_model, run_session, write_graph)
from bertkit.files import UserError
from bertkit.finetuning.tasks.embed import evaluate_sentence_model
from bertkit.model.encoder import Encoder
from bertkit.model.hub import resolve_model
from bertkit.model.kind import ModelKind, model_kind, require_kind
from bertkit.text.tokenizer import Tokenizer, check_pairs, cut_warning

METADATA_KEY = "bertkit.sentence"
"""The graph's metadata_props entry: JSON of what OnnxEmbedder needs besides the tokenizer."""
OUTPUT = "sentence_embedding"

# Traced with the first batch and checked with the second: other sizes and lengths, both padded.
_TRACE_TEXTS = ("Hi.", "Two dogs run across a wide green field while a child watches them "
                "from the old wooden fence.")
_CHECK_TEXTS = ("The cat sleeps.", "Nobody is riding the bicycle on the road near the lake.",
                "A woman slices an onion in the kitchen, and then she fries it in a pan with "
                "some oil, salt and a little pepper for the soup she is making tonight.")


class SentenceGraph(nn.Module):
    """What is traced: the encoder, its pooling and (optionally) the unit length."""

    def __init__(self, encoder: nn.Module, modes: Sequence[str], normalize: bool,
                 segments: bool):
        super().__init__()
        self.encoder, self.modes = encoder, tuple(modes)
        self.normalize, self.segments = normalize, segments

    def forward(self, input_ids, *rest):
        token_type_ids, attention_mask = rest if self.segments else (None, rest[0])
        states = self.encoder(input_ids, token_type_ids, attention_mask).last_hidden_state
        vectors = pool_tokens(states, attention_mask, self.modes)
        # eps as torch.nn.functional.normalize's, which sentence-transformers (and
        # bertkit.embeddings.standardize.unit_rows) use
        return nn.functional.normalize(vectors, dim=-1, eps=1e-12) if self.normalize else vectors


def padded_batch(encoded: Sequence[Encoded]) -> dict[str, np.ndarray]:
    """Tokenized inputs as one batch padded at the end: input_ids, token_type_ids and
    attention_mask [B, T] int64 (a graph without segments ignores token_type_ids)."""
    lengths = np.array([len(e.ids) for e in encoded])
    mask = (np.arange(lengths.max())[None, :] < lengths[:, None]).astype(np.int64)
    ids, types = np.zeros_like(mask), np.zeros_like(mask)
    ids[mask == 1] = np.concatenate([e.ids for e in encoded])
    types[mask == 1] = np.concatenate([e.type_ids for e in encoded])
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


class OnnxEmbedder:
    """A sentence graph and its tokenizer: `encode(texts)` as `Embedder.encode` with the
    directory's defaults, run by onnxruntime. Load with `OnnxEmbedder.load(graph, model_dir)`.
    """

    def __init__(self, session, tokenizer, *, max_length: int, lowercase: bool = False,
                 pairs: bool = True, dim: int, source: str = "the graph",
                 max_padding: float = 0.02):
        self.session, self.tokenizer = session, tokenizer
        self.max_length, self.lowercase, self.pairs = max_length, lowercase, pairs
        self.dim, self.source = dim, source
        self.max_padding = max_padding
        """Largest share of a batch's positions that may be padding (as the Embedder's)."""

    @classmethod
    def load(cls, graph: str | Path, model_dir: str | Path) -> "OnnxEmbedder":
        """The graph `bertkit export onnx` wrote from a sentence model, and the tokenizer of
        that model's directory (the sentence-transformers directory, or its Transformer's)."""
        session = onnx_session(graph)
        settings = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        if settings is None:
            raise UserError(f"{graph}: not a sentence graph (bertkit export onnx --task "
                            f"sentence writes one)")
        settings = json.loads(settings)
        model_dir = resolve_model(model_dir)
        sentence = read_sentence_model(model_dir)
        tokenizer = Tokenizer.load(sentence.transformer if sentence else model_dir)
        return cls(session, tokenizer, **_runner_settings(settings), source=str(graph))

    def encode(self, sentences: str | Sequence[Text], batch_size: int = 32) -> np.ndarray:
        """[N, D] float32 sentence vectors (one [D] vector for a single string)."""
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        if not self.pairs and any(not isinstance(t, str) for t in texts):
            raise UserError(f"{self.source}: the model has one segment type, so it takes no "
                            f"sentence pairs")
        encoded = tokenize_texts(self.tokenizer, texts, self.max_length, True,
                                 lowercase=self.lowercase)
        cut_warning(sum(e.truncated for e in encoded), len(encoded), self.max_length)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        lengths = np.array([len(e.ids) for e in encoded], dtype=np.int64)
        for rows in plan_batches(lengths, batch_size, self.max_padding):
            out[rows] = run_session(self.session, padded_batch([encoded[i] for i in rows]))[0]
        return out[0] if single else out


def is_sentence_model(path: str | Path) -> bool:
    """Whether `path` is an encoder directory with sentence-transformers' modules.json."""
    return model_kind(path) is ModelKind.ENCODER and \
        read_sentence_model(resolve_model(path)) is not None


def _settings(embedder: Embedder) -> dict:
    """What the tokenizer in front of the graph does, recorded in the graph's file."""
    try:
        check_pairs(embedder.config, embedder.source)
        pairs = True
    except UserError:
        pairs = False
    return {"max_length": embedder.max_length, "lowercase": embedder.lowercase,
            "pairs": pairs, "dim": embedder.sentence_width(), "pool": list(embedder.pool),
            "normalize": embedder.normalize}


def _runner_settings(settings: dict) -> dict:
    """OnnxEmbedder's arguments among the recorded settings (pool and normalize are in the
    graph; they are recorded for people who read the file)."""
    return {k: settings[k] for k in ("max_length", "lowercase", "pairs", "dim")}


def _trace_batch(embedder: Embedder) -> dict[str, np.ndarray]:
    """A batch with padding, so that the traced encoder keeps applying the mask (a batch
    without any takes its unmasked path): the short text is cut by one more token if the
    model's maximum length made both texts alike."""
    short, long = embedder.tokenize(list(_TRACE_TEXTS))
    if len(short.ids) >= len(long.ids):
        short = dataclasses.replace(short, ids=short.ids[:-1], type_ids=short.type_ids[:-1])
    return padded_batch([short, long])


def max_difference(embedder: Embedder, session) -> float:
    """Largest |onnx - Embedder| over a padded batch of other size and lengths than the
    traced one."""
    encoded = embedder.tokenize(list(_CHECK_TEXTS))
    want = embedder.pool_sentences(encoded)
    got, = run_session(session, padded_batch(encoded))
    return float(np.abs(got - want).max())


def export_sentence(model: str | Path, out: str | Path, *, quantize: bool = False,
                    dev: str | Path | None = None, opset: int = OPSET) -> ExportResult:
    """Write the sentence model at `model` as a graph at `out` (see the module docstring);
    `dev`: a scored-pairs, pairs/triplets or NLI file scored with PyTorch, the graph and (with
    `quantize`) the int8 graph, as `bertkit evaluate` scores a sentence model."""
    onnx_modules()
    path, out = require_kind(model, ModelKind.ENCODER), Path(out)
    embedder = Embedder.load(path)  # the reference, with the directory's settings
    scores = {}
    if dev is not None:  # a bad file stops the export before anything is written
        scores["pytorch"] = evaluate_sentence_model(embedder, dev)
    cfg, segments = embedder.config, embedder.config.architecture == "bert"
    encoder = Encoder(cfg, fast=False)  # the reference path applies the mask in every case
    encoder.load_state_dict(embedder.encoder.state_dict())
    graph = SentenceGraph(encoder.eval(), embedder.pool, embedder.normalize, segments).eval()
    inputs = {k: torch.from_numpy(v) for k, v in _trace_batch(embedder).items()
              if segments or k != "token_type_ids"}
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs} | {OUTPUT: {0: "batch"}}
    settings = _settings(embedder)
    write_graph(graph, inputs, [OUTPUT], axes, out, opset,
                metadata={METADATA_KEY: json.dumps(settings)})
    session = onnx_session(out)
    detail = "+".join(embedder.pool) + " pooling" + (", normalized" if embedder.normalize else "")
    result = ExportResult(out, "sentence", list(inputs), [OUTPUT],
                          max_difference(embedder, session), detail=detail)
    if quantize:
        result.quantized = quantize_model(out, per_channel=True)
    if dev is not None:
        for name, graph_path in (("onnx", out), ("onnx-int8", result.quantized)):
            if graph_path is not None:
                runner = OnnxEmbedder(onnx_session(graph_path), embedder.tokenizer,
                                      **_runner_settings(settings), source=str(graph_path))
                scores[name] = evaluate_sentence_model(runner, dev)
        result.dev_scores = scores
    return result


__all__ = ["export_sentence", "OnnxEmbedder", "SentenceGraph", "padded_batch",
           "is_sentence_model", "METADATA_KEY"]
