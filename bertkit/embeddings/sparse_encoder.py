"""A sparse (SPLADE) encoder loaded for use: texts in, vectors over the vocabulary out.

    encoder = SparseEncoder.load("runs/splade")
    vectors = encoder.encode(["what is a river bank?", "the bank raised rates"])
    encoder.decode(vectors[0], top_k=10)   # [("bank", 2.1), ("river", 1.7), ...]

The method names are sentence-transformers' SparseEncoder's: `encode` (a torch sparse COO
tensor, or dense with `convert_to_sparse_tensor=False`), `encode_query`, `encode_document`,
`decode`, `similarity` (dot products), and a directory bertkit writes gives there the vectors
it gives here. `embed_file` writes a file's vectors as JSON lines of {token: weight}, the
object an inverted index takes in (Anserini's JsonVectorCollection, Elasticsearch's and
OpenSearch's rank_features).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertkit.embeddings.inputs import plan_batches
from bertkit.embeddings.files import check_out_suffix, text_chunks
from bertkit.embeddings.sparse import (POOLING_DIR, SENTENCE_CONFIG_FILE, SpladeModel,
                                       active_dims, new_model)
from bertkit.files import UserError, atomic_file, check_not_input, read_json
from bertkit.model import hub
from bertkit.model.encoder import Encoder
from bertkit.model.kind import SENTENCE_MODULES_FILE, ModelKind, require_kind
from bertkit.progress import Progress
from bertkit.runtime import autocast, check_inference_precision, resolve_device
from bertkit.text.tokenizer import Tokenizer, check_fits, cut_warning


class SparseEncoder:
    """A SPLADE model with its tokenizer (`load` a directory `bertkit finetune sparse` or
    sentence-transformers wrote)."""

    def __init__(self, model: SpladeModel, tokenizer, max_seq_length: int,
                 source: str = "the model", precision: str = "fp32"):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        """Texts are cut to this many tokens."""
        self.source = source
        self.precision = check_inference_precision(precision)
        """fp32 (exact), or bf16: the model under bf16 autocast, its vectors read back in fp32
        (about twice as fast on a CPU with AVX512-BF16 or AMX and on a GPU since Ampere)."""
        self.device = next(model.parameters()).device
        self._tokens = [tokenizer.id_to_token(i) or f"[{i}]"
                        for i in range(model.encoder.config.vocab_size)]

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu",
             max_length: int | None = None, precision: str = "fp32") -> "SparseEncoder":
        """The encoder of a SparseEncoder directory (modules.json: a masked-LM transformer,
        then SpladePooling with max and relu, the only SPLADE bertkit computes), run in
        `precision` (fp32 or bf16)."""
        path = require_kind(path, ModelKind.SPARSE)
        modules = read_json(path / SENTENCE_MODULES_FILE, "sentence-transformers modules file")
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] if isinstance(m, dict) else "?"
                 for m in modules]
        if len(kinds) != 2 or kinds[1] != "SpladePooling" or "?" in kinds:
            raise UserError(f"{path / SENTENCE_MODULES_FILE}: modules {' -> '.join(kinds)}; "
                            f"bertkit reads a transformer -> SpladePooling only")
        pooling = read_json(path / str(modules[1].get("path", POOLING_DIR)) / "config.json")
        if not isinstance(pooling, dict) or (pooling.get("pooling_strategy", "max"),
                                             pooling.get("activation_function", "relu")) \
                != ("max", "relu"):
            raise UserError(f"{path}: SpladePooling {pooling}; bertkit computes max pooling of "
                            f"relu activations (SPLADE-max) only")
        model_dir = path / str(modules[0].get("path", ""))
        tokenizer = Tokenizer.load(model_dir)
        limit = max_length or _max_seq_length(model_dir) or hub.load_config(model_dir).max_positions
        return cls(load_model(model_dir).to(resolve_device(device)), tokenizer, limit,
                   source=str(path), precision=precision)

    # Vectors ------------------------------------------------------------------------------------

    def encode(self, sentences: str | Sequence[str], batch_size: int = 32,
               show_progress_bar: bool = False,
               convert_to_sparse_tensor: bool = True) -> torch.Tensor:
        """[N, V] vectors (a single text: [V]) on the CPU, as a torch sparse COO tensor
        (sentence-transformers' default) or dense."""
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        dense, cut = self._dense(texts, batch_size, show_progress_bar)
        cut_warning(cut, len(texts), self.max_seq_length, stacklevel=2)
        out = dense[0] if single else dense
        return out.to_sparse() if convert_to_sparse_tensor else out

    def encode_query(self, sentences, **kwargs) -> torch.Tensor:
        """`encode` for queries (this model has no query prompt: the same vectors)."""
        return self.encode(sentences, **kwargs)

    def encode_document(self, sentences, **kwargs) -> torch.Tensor:
        """`encode` for documents (this model has no document prompt: the same vectors)."""
        return self.encode(sentences, **kwargs)

    def similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Dot products of every row of `a` with every row of `b`: [N, M], dense."""
        a, b = (x.to_dense() if x.is_sparse else x for x in (a, b))
        return a.reshape(-1, a.shape[-1]).float() @ b.reshape(-1, b.shape[-1]).float().T

    def decode(self, embeddings: torch.Tensor, top_k: int | None = None):
        """The entries of a vector as (token, weight), heaviest first (the top `top_k`; None:
        every non-zero one); for [N, V] vectors, a list of them per row."""
        dense = embeddings.to_dense() if embeddings.is_sparse else embeddings
        if dense.dim() == 2:
            return [self.decode(row, top_k) for row in dense]
        nonzero = torch.nonzero(dense, as_tuple=True)[0]
        weights = dense[nonzero]
        order = torch.argsort(weights, descending=True, stable=True)[:top_k]
        return [(self._tokens[int(nonzero[i])], float(weights[i])) for i in order]

    def _dense(self, texts: list[str], batch_size: int, progress: bool
               ) -> tuple[torch.Tensor, int]:
        """The [N, V] vectors of `texts`, and how many were cut to `max_seq_length`."""
        encs = self.tokenizer.encode_batch(texts, None, max_length=self.max_seq_length,
                                           truncation=True, with_offsets=False)
        out = torch.zeros(len(texts), len(self._tokens))
        lengths = np.array([len(e.ids) for e in encs])
        bar = Progress("encode", int(lengths.sum()), "tokens", enabled=progress)
        for rows in plan_batches(lengths, batch_size, 0.02):
            out[torch.from_numpy(rows)] = self._batch([encs[i] for i in rows])
            bar.update(add=int(lengths[rows].sum()))
        bar.finish()
        return out, int(np.sum(encs.cut))

    def _batch(self, encodings) -> torch.Tensor:
        width = max(len(e.ids) for e in encodings)
        ids, types, mask = (torch.zeros(len(encodings), width, dtype=torch.long)
                            for _ in range(3))
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n], types[row, :n] = torch.tensor(e.ids), torch.tensor(e.type_ids)
            mask[row, :n] = 1
        with torch.inference_mode(), autocast(self.device, self.precision):
            return self.model(ids.to(self.device), types.to(self.device),
                              mask.to(self.device)).float().cpu()

    # Files --------------------------------------------------------------------------------------

    def embed_file(self, input_path: str | Path, out: str | Path, *, batch_size: int = 32,
                   text_field: str = "text", chunk_lines: int = 10000,
                   progress: bool = True) -> dict:
        """Each text of a file (its lines, or the `text_field` of its records) as one JSON
        line, {"row", "line" (and "file" for several), "vector": {token: weight}}, heaviest
        first; written whole or not at all. Returns the counts and the mean non-zero
        entries per text."""
        out = check_jsonl_out(out)
        check_not_input(out, [Path(input_path)])
        rows, nonzero, cut = 0, 0.0, 0
        bar = Progress("embed", None, "lines", enabled=progress)
        with atomic_file(out) as f:
            for places, texts in text_chunks(Path(input_path), chunk_lines, text_field):
                if any(not isinstance(t, str) for t in texts):
                    raise UserError(f"{input_path}: a tab in a line makes a pair; a sparse "
                                    f"vector is of one text")
                vectors, chunk_cut = self._dense(texts, batch_size, False)
                cut += chunk_cut
                nonzero += active_dims(vectors) * len(texts)
                for place, vector in zip(places, vectors):
                    terms = dict(self.decode(vector))
                    f.write(json.dumps({"row": rows, **place, "vector": terms},
                                       ensure_ascii=False) + "\n")
                    rows += 1
                bar.update(add=len(texts))
            if rows == 0:  # inside: no empty file is left
                raise UserError(f"{input_path}: no texts to encode")
        bar.finish()
        cut_warning(cut, rows, self.max_seq_length, "lines", str(input_path))
        return {"rows": rows, "active_dims": nonzero / rows}


def check_jsonl_out(out: str | Path) -> Path:
    """`out` if it names a .jsonl file (a sparse encoder's vectors); else one error line."""
    return check_out_suffix(out, ".jsonl", "a sparse encoder's vectors are written as JSON "
                                           "lines of {token: weight}")


def load_model(model_dir: str | Path) -> SpladeModel:
    """The encoder and masked-LM head of a directory, every weight the model uses from its
    files (BertForMaskedLM has no pooler, which SPLADE never reads)."""
    cfg = hub.load_config(model_dir)
    encoder_state, rest = hub.from_hf_state_dict(hub.load_weights(model_dir), cfg.architecture)
    with torch.random.fork_rng(devices=[]):  # the pooler's draw leaves the caller's stream
        model = new_model(Encoder(cfg))
    check_fits(Tokenizer.load(model_dir), cfg, str(model_dir))
    state = {"encoder." + k: v for k, v in encoder_state.items()}
    state.update({k: v for k, v in rest.items() if k.startswith("mlm.")})
    own = model.state_dict()
    missing = [k for k in own if k not in state and not k.startswith("encoder.pooler.")
               and k != "steps"]
    if missing:
        raise UserError(f"{model_dir}: no weights for {', '.join(missing[:3])}: not a "
                        f"masked-LM directory")
    for name, tensor in state.items():
        if name in own and own[name].shape != tensor.shape:
            raise UserError(f"{model_dir}: weight {name} has shape {tuple(tensor.shape)}, the "
                            f"config says {tuple(own[name].shape)}")
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    return model.eval()


def _max_seq_length(model_dir: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length, else the tokenizer's model_max_length."""
    for name, key in ((SENTENCE_CONFIG_FILE, "max_seq_length"),
                      ("tokenizer_config.json", "model_max_length")):
        if (model_dir / name).is_file():
            value = read_json(model_dir / name).get(key)
            if isinstance(value, int) and 0 < value < 10**9:
                return value
    return None


__all__ = ["SparseEncoder", "load_model", "check_jsonl_out"]
