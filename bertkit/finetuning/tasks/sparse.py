"""A sparse retriever you train: SPLADE, each text a vector over the vocabulary read off the
masked-LM head (`bertkit.embeddings.sparse`), saved as a sentence-transformers SparseEncoder.

It reads what `finetune embed` reads for ranking (its readers: pairs `anchor,positive`,
triplets `anchor,positive,negative`, queries `query,relevant[,negatives]`, NLI), and batches
alike (no text twice in a batch). The loss is in-batch negatives over dot products plus the
FLOPS regulariser of the queries and of the documents, each with its weight, both weights
growing quadratically over the first `reg_warmup` of the steps. A model directory without a
masked-LM head (a sentence model such as all-MiniLM-L6-v2) gets one tied to its word
embeddings, with a new transform and bias that start it as a lexical matcher
(`sparse.lexical_start`). The dev figures are embed's retrieval figures
(nDCG@10, MRR@10, recall) over dot products, and the vectors' density: the mean count of
non-zero entries of a query's vector and of a document's.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from bertkit.embeddings import sparse
from bertkit.embeddings.evaluation import retrieval_figures
from bertkit.files import UserError
from bertkit.finetuning import sentence_pairs as sp
from bertkit.finetuning.task import Defaults, Task, fitted
from bertkit.finetuning.batches import RANK_ROWS
from bertkit.finetuning.tasks.embed import Embed, gathered, search_inputs

_RANKED = ("pairs", "triplets", "queries", "nli")
"""The training files whose rows say what a text must find: those SPLADE's ranking loss reads."""


@dataclass(frozen=True)
class Sparse(Task):
    """Sparse vectors over the vocabulary (SPLADE) for search by an inverted index."""
    name: ClassVar[str] = "sparse"
    defaults: ClassVar[Defaults] = Defaults(epochs=1, batch_size=32, max_length=128,
                                            head_lr=2e-5, lr=2e-5, small_model_lr=2e-4)
    verb: ClassVar[str] = "embed"
    pipeline_tag: ClassVar[str] = "feature-extraction"
    library_name: ClassVar[str] = "sentence-transformers"
    mixes_layers: ClassVar[bool] = False  # its weights are the masked-LM head's, on the last layer
    card_tags: ClassVar[tuple[str, ...]] = ("sentence-transformers", "sparse-encoder", "sparse",
                                            "splade")  # as SparseEncoder's own SPLADE cards

    query_reg: float = sparse.DEFAULT_QUERY_REG
    """Weight of the FLOPS regulariser on the queries' vectors (higher: sparser queries)."""
    doc_reg: float = sparse.DEFAULT_DOC_REG
    """Weight of the FLOPS regulariser on the documents' vectors (positives and negatives)."""
    reg_warmup: float = sparse.DEFAULT_REG_WARMUP
    """Share of the steps over which both weights grow quadratically from 0 to their value."""
    gather_across_devices: bool = False
    """Under torchrun, each process's loss reads the vectors of every process's share of the
    batch (gathered with their gradients): the ranking loss's negatives and the FLOPS are
    those of the whole --batch-size, as in one process; without it, those of its own share."""
    kind: str = fitted("")
    """What the training file holds (pairs, triplets, queries, nli)."""
    total_steps: int = fitted(0)
    """The run's optimisation steps, over which the warm-up is laid."""

    @property
    def _embed(self) -> Embed:
        """embed's ranking task, whose readers, batches and vectors' columns this one uses."""
        return Embed(objective="mnrl", kind=self.kind, max_length=self.max_length)

    # Settings -----------------------------------------------------------------------------------
    def configure(self, train_path: Path) -> "Sparse":
        kind = sp.detect_kind(train_path)
        if kind not in _RANKED:
            raise UserError(f"{train_path}: sparse trains on pairs, triplets, queries or an NLI "
                            f"file, this file holds {kind}")
        for flag, value in (("--query-reg", self.query_reg), ("--doc-reg", self.doc_reg)):
            if value < 0:
                raise UserError(f"{flag} must be at least 0, got {value}")
        if not 0 <= self.reg_warmup <= 1:
            raise UserError(f"--reg-warmup must be in [0, 1], got {self.reg_warmup}")
        return dataclasses.replace(self, kind=kind)

    def for_backbone(self, model) -> "Sparse":
        if model.architecture is None:
            raise UserError("sparse trains a transformer encoder's masked-LM head, not this "
                            "backbone")
        return self

    def with_steps(self, total_steps: int) -> "Sparse":
        return dataclasses.replace(self, total_steps=total_steps)

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list:
        return self._embed.read(path)

    def with_labels(self, train, dev) -> "Sparse":
        if not any(ex.train for ex in train):
            raise UserError("nothing in the training file trains the ranking loss")
        if not any(_ranked(ex) for ex in dev):
            raise UserError("the dev data gives no retrieval figure to keep the best model by: "
                            "pass --dev with pairs, triplets or queries")
        return self

    def groups(self, examples) -> list:
        return self._embed.groups(examples)

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False) -> list:
        return self._embed.encode(tokenizer, examples, training=training)

    def batch_order(self, items, batch_size, generator) -> list[list[int]]:
        return self._embed.batch_order(items, batch_size, generator)

    def collate(self, items) -> dict:
        return self._embed.collate(items)

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder, layer_mix: bool = False) -> sparse.SpladeModel:
        return sparse.new_model(encoder)

    def load_pretrained(self, model, model_dir: Path) -> None:
        sparse.load_head(model, model_dir)

    def loss(self, model, batch) -> torch.Tensor:
        columns = self._embed.columns(model, batch)
        if self.gather_across_devices:
            columns, _ = gathered(columns, None, batch.get(RANK_ROWS))
        step = model.count_step()
        weights = [sparse.regulariser_weight(step, self.total_steps, self.reg_warmup, w)
                   for w in (self.query_reg, self.doc_reg)]
        return sparse.splade_loss(columns, *weights)

    def infer(self, model, batch, items) -> list:
        vectors = self._embed.columns(model, batch)[0].float().cpu()
        return [(row.to_sparse(),) for row in vectors]  # a dev set's V-wide rows, kept small

    def decode_outputs(self, outputs, items, examples) -> list:
        return self._embed.decode_outputs(outputs, items, examples)

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples, predictions) -> dict:
        """Retrieval figures of dot products: each query searches every passage of the dev
        examples; and the mean non-zero entries of a query's and a passage's vector."""
        chosen = [(ex, v) for ex, v in zip(examples, predictions)
                  if v is not None and _ranked(ex)]
        if not chosen:
            raise UserError("nothing to score: no pairs, triplets or queries among the examples")
        return _figures(*search_inputs(chosen))

    def selection(self, scores: dict) -> float:
        return scores["ndcg@10"]

    def baseline(self, train, test, start) -> dict:
        """The model before fine-tuning: its masked-LM head's vectors, what SPLADE starts from
        (a head new to a sentence model ranks at random)."""
        return {**start(), "predictor": "the model before fine-tuning"}

    # Use ----------------------------------------------------------------------------------------
    def save_model(self, backbone, model, path: Path, **_) -> Path:
        """A sentence-transformers SparseEncoder directory (no bertkit_task.json: `embed` and
        `SparseEncoder.load` read it)."""
        return sparse.save_sparse_model(model, path, backbone.tokenizer, self.max_length)

    def usage(self, out: str, data: str) -> tuple[str, str]:
        return (f"bertkit embed --model {shlex.quote(out)} --input texts.txt "
                f"--out vectors.jsonl",
                f"from bertkit import SparseEncoder\n\n"
                f"encoder = SparseEncoder.load({json.dumps(out)})\n"
                f"encoder.decode(encoder.encode([\"a query\"])[0], top_k=10)")


def _figures(queries: torch.Tensor, documents: torch.Tensor, relevant: list[list[int]]) -> dict:
    """Retrieval figures of sparse [Q, V] queries searching sparse [N, V] documents by dot
    product (`relevant[q]`: the indices of query q's relevant documents), and the density."""
    return {**retrieval_figures(sparse.dot_products(queries, documents), relevant).as_dict(),
            "query_active_dims": sparse.active_dims(queries),
            "corpus_active_dims": sparse.active_dims(documents), "queries": len(relevant)}


def evaluate_sparse_model(encoder, path, batch_size: int = 32, progress: bool = False) -> dict:
    """The figures `finetune sparse` reports of a sparse encoder (a `SparseEncoder`) on a
    pairs, triplets, queries or NLI file: each query searches every passage of the file by
    dot product (nDCG@10, MRR@10, recall@1/10), and the mean non-zero entries of a query's
    and a passage's vector. Each distinct text is encoded once."""
    examples = [ex for ex in Sparse().read(path) if _ranked(ex)]
    if not examples:
        raise UserError(f"{path}: nothing to score (expected pairs, triplets, queries or an "
                        f"NLI file)")
    texts = list(dict.fromkeys(t for ex in examples for t in ex.texts))
    index = {t: i for i, t in enumerate(texts)}
    corpus = list(dict.fromkeys(t for ex in examples for t in ex.texts[1:]))
    at = {t: i for i, t in enumerate(corpus)}
    vectors = encoder.encode(texts, batch_size=batch_size, show_progress_bar=progress)
    rows = [index[ex.texts[0]] for ex in examples], [index[t] for t in corpus]
    queries, documents = (vectors.index_select(0, torch.tensor(r)) for r in rows)
    relevant = [[at[t] for t in ex.texts[1:1 + ex.positives]] for ex in examples]
    return _figures(queries, documents, relevant)


def _ranked(example) -> bool:
    """Whether a dev example is scored by retrieval: a text with its relevant passages, not a
    scored pair."""
    return example.dev and example.score is None


__all__ = ["Sparse", "evaluate_sparse_model"]
