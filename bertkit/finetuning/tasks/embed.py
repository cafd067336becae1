"""Sentence embeddings you train: a bi-encoder (one encoder, a pooling, optionally unit length)
whose cosines mean similarity, saved as a sentence-transformers directory.

The loss follows what the training file holds (`bertkit.finetuning.sentence_pairs.detect_kind`):

| file | loss (`auto`) |
|---|---|
| pairs `anchor,positive` | multiple-negatives ranking (in-batch negatives) |
| triplets `anchor,positive,negative` | the same, the negative a hard one |
| scored pairs `sentence1,sentence2,score` | CoSENT (`cosine-mse` as an option) |
| NLI `premise,hypothesis,label` (SICK) | ranking: entailments positive, contradictions hard negatives |
| sentences (`.txt`) | unsupervised SimCSE: each batch encoded twice, dropout on |
| queries `query,relevant[,negatives]` | ranking: each relevant passage a positive of its query |

An example is one `Item` whose first text is `ids` and whose other texts' ids are in `extra`;
a batch holds one padded block per column (`input_ids`, `input_ids_1`, ...). Batches for the
in-batch-negative losses hold no text twice (`bertkit.embeddings.batches.unique_batches`).
The dev figure is Spearman's correlation of cosine and score on scored pairs (or an NLI file's
relatedness), else nDCG@10 of finding each anchor's positives (a query's relevant passages)
among every dev passage. Dev texts are encoded once each, however many rows name them.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Sequence

import numpy as np
import torch
from torch import nn

from bertkit.embeddings import losses
from bertkit.embeddings.batches import unique_batches
from bertkit.embeddings.evaluation import search_figures, sts_figures
from bertkit.embeddings.matryoshka import matryoshka_loss
from bertkit.embeddings.sentence_model import (pool_tokens, read_sentence_model,
                                               sentence_model_files)
from bertkit.files import UserError
from bertkit.finetuning import distillation
from bertkit.finetuning import sentence_pairs as sp
from bertkit.finetuning.batches import RANK_ROWS
from bertkit.finetuning.inputs import Item, length_batches, pad_inputs
from bertkit.finetuning.task import Defaults, Task, fitted
from bertkit.model import hub
from bertkit.model.encoder import set_dropout
from bertkit.training.gather import gather_rows

LOSSES = ("mnrl", "simcse", "cosent", "cosine-mse")
SIMCSE_DROPOUT = 0.1
"""SimCSE's dropout (Gao et al. 2021: BERT's own 0.1 was best) for a model that has none."""
_IN_BATCH = ("mnrl", "simcse")


@dataclass
class EmbedExample:
    """The texts of one training example (anchor first), its score when scored, and whether
    it trains (`train`) and is scored on dev (`dev`)."""
    texts: tuple[str, ...]
    score: float | None = None
    source: str = ""
    train: bool = True
    dev: bool = True
    positives: int = 1
    """How many texts after the anchor are relevant to it (the rest are negatives)."""


class SentenceEncoder(nn.Module):
    """The encoder and its pooling: texts' ids -> one vector each (unit length if asked)."""

    def __init__(self, encoder: nn.Module, pooling: str, normalize: bool):
        super().__init__()
        self.encoder, self.pooling, self.normalize = encoder, pooling, normalize

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        h = self.encoder(input_ids, token_type_ids, attention_mask).last_hidden_state
        v = pool_tokens(h, attention_mask, (self.pooling,))  # as the ONNX graph pools
        return nn.functional.normalize(v, dim=-1) if self.normalize else v


def search_inputs(chosen: Sequence[tuple]
                  ) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """A dev set's (example, its texts' vectors) as a search: the queries' vectors [Q, W],
    every positive and negative passage once [P, W], and each query's relevant passages."""
    corpus: dict[str, int] = {}
    passages = []
    for ex, v in chosen:
        for text, vector in zip(ex.texts[1:], v[1:]):
            if text not in corpus:
                corpus[text] = len(passages)
                passages.append(vector)
    relevant = [[corpus[t] for t in ex.texts[1:1 + ex.positives]] for ex, _ in chosen]
    return torch.stack([v[0] for _, v in chosen]), torch.stack(passages), relevant


@dataclass(frozen=True)
class Embed(Task):
    """Sentence vectors trained so that their cosines mean similarity."""
    name: ClassVar[str] = "embed"
    defaults: ClassVar[Defaults] = Defaults(epochs=1, batch_size=32, max_length=128,
                                            lr=2e-5, small_model_lr=2e-4)
    verb: ClassVar[str] = "embed"
    pipeline_tag: ClassVar[str] = "sentence-similarity"
    library_name: ClassVar[str] = "sentence-transformers"
    mixes_layers: ClassVar[bool] = False  # its vectors pool the last layer

    objective: Literal["auto", "mnrl", "cosent", "cosine-mse", "simcse"] = dataclasses.field(
        default="auto", metadata={"flag": "loss"})
    """mnrl (multiple-negatives ranking: the other texts of the batch are the negatives),
    cosent (CoSENT: scored pairs ranked by score), cosine-mse (squared error of cosine and score),
    simcse (SimCSE: a sentence against itself under another dropout), or auto: by the
    training file (pairs, triplets, NLI: mnrl; scored pairs: cosent; sentences in a .txt file:
    simcse)."""
    scale: float = losses.DEFAULT_SCALE
    """The cosines' scale in mnrl, simcse and cosent (20: a temperature of 0.05)."""
    symmetric: bool = False
    """mnrl also the other way: each positive must find its anchor."""
    gather_across_devices: bool = False
    """Under torchrun, each process's loss reads the vectors of every process's share of the
    batch (gathered with their gradients): mnrl's and simcse's negatives, cosent's pairs are
    those of the whole --batch-size, as in one process; without it, those of its own share."""
    pooling: Literal["mean", "cls", "max"] = "mean"
    """How the token vectors become the sentence vector."""
    normalize: bool = True
    """Save a Normalize module: the vectors at unit length."""
    matryoshka_dims: tuple[int, ...] = ()
    """Also train these prefixes of the vector (Matryoshka), e.g. 64 128; the loss is summed
    over them and the whole vector."""
    dropout: float | None = None
    """Dropout on the encoder while training (hidden and attention); none: the model's own
    rates, except that simcse on a model made without dropout (the modern recipe) uses 0.1:
    dropout is SimCSE's only noise, and with none its two views are the same vector."""
    score_range: tuple[float, ...] = ()
    """LOW HIGH of scored pairs' scores, brought to 0..1 (cosine-mse needs cosine-scale
    scores; STS-B: 0 5)."""
    kind: str = fitted("")
    """What the training file holds (detect_kind)."""

    # Settings -----------------------------------------------------------------------------------
    def configure(self, train_path: Path) -> "Embed":
        kind = sp.detect_kind(train_path)
        auto = {"sentences": "simcse", "scored": "cosent"}.get(kind, "mnrl")
        objective = auto if self.objective == "auto" else self.objective
        if self.score_range and len(self.score_range) != 2:
            raise UserError(f"--score-range takes LOW HIGH, got {len(self.score_range)} values")
        needs = {"simcse": ("sentences",), "cosent": ("scored", "nli"),
                 "cosine-mse": ("scored", "nli"), "mnrl": ("pairs", "triplets", "nli", "queries")}[objective]
        if kind not in needs:
            raise UserError(f"{train_path}: --loss {objective} trains on {' or '.join(needs)}, "
                            f"this file holds {kind}")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise UserError(f"--dropout must be in [0, 1), got {self.dropout}")
        if any(d < 1 for d in self.matryoshka_dims):
            raise UserError("--matryoshka-dims must be positive")
        return dataclasses.replace(self, objective=objective, kind=kind)

    def for_backbone(self, model) -> "Embed":
        if model.architecture is None:
            raise UserError("embed trains a transformer encoder, not this backbone")
        if too_wide := [d for d in self.matryoshka_dims if d > model.width]:
            raise UserError(f"--matryoshka-dims {too_wide[0]}: above the width of the model's "
                            f"vectors ({model.width})")
        return self

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list[EmbedExample]:
        kind = sp.detect_kind(path)
        scored = self.objective in ("cosent", "cosine-mse")
        limits = tuple(self.score_range) or None
        if kind == "sentences":
            return [EmbedExample((s,), dev=False) for s in sp.read_sentences(path)]
        if kind == "scored":
            return [EmbedExample((p.text_a, p.text_b), p.score, p.source, train=scored)
                    for p in sp.read_scored_pairs(path, score_range=limits)]
        if kind == "pairs":
            return [EmbedExample((p.anchor, p.positive), None, p.source, train=not scored)
                    for p in sp.read_pairs(path)]
        if kind == "triplets":
            return [EmbedExample((t.anchor, t.positive, t.negative), None, t.source,
                                 train=not scored) for t in sp.read_triplets(path)]
        if kind == "queries":
            return _query_examples(sp.read_queries(path), train=not scored)
        nli = sp.read_nli(path)  # relatedness scores the dev; entailments train mnrl
        out = [EmbedExample((p.text_a, p.text_b), p.score, p.source, train=scored)
               for p in nli.scored]
        return out + [EmbedExample((t.anchor, t.positive, t.negative), None, t.source,
                                   train=not scored, dev=not out) for t in nli.triplets] + \
            [EmbedExample((p.anchor, p.positive), None, p.source, train=not scored,
                          dev=not out) for p in nli.pairs]

    def with_labels(self, train, dev) -> "Embed":
        if not any(ex.train for ex in train):
            raise UserError(f"nothing in the training file trains --loss {self.objective}")
        if not any(ex.dev for ex in dev):
            raise UserError("the dev data gives no figure to keep the best model by: pass "
                            "--dev with scored pairs, pairs or an NLI file")
        return self

    def groups(self, examples) -> list:
        return [ex.texts[0] for ex in examples]  # a premise's rows stay on one side

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False) -> list[Item]:
        if not training:  # one item per distinct text (`decode_outputs` puts them back)
            texts = _dev_texts(examples)
            encs = tokenizer.encode_batch(texts, None, max_length=self.max_length,
                                          truncation=True, with_offsets=False)
            cut = encs.cut
            return [Item(i, e.ids, e.type_ids, extra=(), cut=bool(cut[i]))
                    for i, e in enumerate(encs)]
        chosen = [(i, ex) for i, ex in enumerate(examples) if ex.train]
        items = []
        for width in sorted({len(ex.texts) for _, ex in chosen}):
            group = [(i, ex) for i, ex in chosen if len(ex.texts) == width]
            columns = [tokenizer.encode_batch([ex.texts[c] for _, ex in group], None,
                                              max_length=self.max_length, truncation=True,
                                              with_offsets=False) for c in range(width)]
            cut = np.any([col.cut for col in columns], axis=0)  # once: each call builds [B]
            for row, (i, ex) in enumerate(group):
                encs = [col[row] for col in columns]
                items.append(Item(i, encs[0].ids, encs[0].type_ids, target=ex.score,
                                  extra=tuple((e.ids, e.type_ids) for e in encs[1:]),
                                  cut=bool(cut[row])))
        return sorted(items, key=lambda it: it.example)

    def batch_order(self, items, batch_size, generator) -> list[list[int]]:
        if self.objective not in _IN_BATCH:  # by the longest column: all pad to it
            return length_batches([max(len(it.ids), *(len(ids) for ids, _ in it.extra))
                                   for it in items], batch_size, generator)
        # in-batch negatives: no text twice in a batch, one column count per batch
        texts = [(tuple(it.ids), *(tuple(ids) for ids, _ in it.extra)) for it in items]
        batches = []
        for width in sorted({len(t) for t in texts}):
            idx = [i for i, t in enumerate(texts) if len(t) == width]
            batches += [[idx[j] for j in b]
                        for b in unique_batches([texts[i] for i in idx], batch_size, generator)]
        order = torch.randperm(len(batches), generator=generator).tolist()
        return [batches[i] for i in order]

    def collate(self, items) -> dict:
        batch = pad_inputs(items)
        for c in range(len(items[0].extra)):
            column = pad_inputs([Item(0, it.extra[c][0], it.extra[c][1]) for it in items])
            batch.update({f"{k}_{c + 1}": v for k, v in column.items()})
        if items[0].target is not None:
            batch["labels"] = torch.tensor([float(it.target) for it in items])
        return batch

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder, layer_mix: bool = False) -> SentenceEncoder:
        rate = self.dropout
        config = encoder.config
        if rate is None and self.objective == "simcse" and \
                not (config.hidden_dropout or config.attention_dropout):
            rate = SIMCSE_DROPOUT
            warnings.warn(f"the model has no dropout, SimCSE's only noise: training with "
                          f"dropout {rate} (--dropout sets another)", stacklevel=2)
        if rate is not None:
            set_dropout(encoder, rate)
        return SentenceEncoder(encoder, self.pooling, self.normalize)

    def columns(self, model, batch, repeat: int = 1) -> list[torch.Tensor]:
        """The batch's vectors, one `[B, D]` tensor per column (the columns again `repeat`
        times: SimCSE's second view, its own dropout), from ONE forward pass over all of them
        padded alike: on a CPU, one call of 2B short rows costs well under two calls of B."""
        count = 1 + sum(f"input_ids_{c}" in batch for c in range(1, len(batch)))
        names = ["" if c == 0 else f"_{c}" for c in range(count)] * repeat
        longest = max(batch["input_ids" + n].shape[1] for n in names)

        def stacked(key: str) -> torch.Tensor:
            return torch.cat([nn.functional.pad(batch[key + n],
                                                (0, longest - batch[key + n].shape[1]))
                              for n in names])

        vectors = model(stacked("input_ids"), stacked("token_type_ids"),
                        stacked("attention_mask"))
        return list(vectors.split(batch["input_ids"].shape[0]))

    def loss_of(self, columns: Sequence[torch.Tensor], scores) -> torch.Tensor:
        """This task's loss of a batch's vectors (and scores)."""
        if self.objective == "cosent":
            return losses.cosent_loss(*columns, scores, scale=self.scale)
        if self.objective == "cosine-mse":
            return losses.cosine_mse_loss(*columns, scores)
        if self.objective == "simcse":
            return losses.simcse_loss(*columns, scale=self.scale)
        return losses.multiple_negatives_ranking_loss(
            columns[0], columns[1], columns[2] if len(columns) > 2 else None,
            scale=self.scale, symmetric=self.symmetric)

    def loss(self, model, batch) -> torch.Tensor:
        # simcse: the same sentences twice, each copy with its own dropout mask
        columns = self.columns(model, batch, repeat=2 if self.objective == "simcse" else 1)
        scores = batch.get("labels")
        if self.gather_across_devices:
            columns, scores = gathered(columns, scores, batch.get(RANK_ROWS))
        if not self.matryoshka_dims:
            return self.loss_of(columns, scores)
        width = columns[0].shape[-1]
        dims = sorted({*self.matryoshka_dims, width})
        return matryoshka_loss(lambda *cols: self.loss_of(cols, scores), columns, dims)

    def infer(self, model, batch, items) -> list:
        columns = [c.float().cpu() for c in self.columns(model, batch)]
        return [tuple(c[row] for c in columns) for row in range(len(items))]

    def sentence_teacher(self, path: Path) -> "Embed | None":
        """A sentence-transformers directory of one pooling mode that bertkit trains: its
        pooling and normalization (the vectors the student learns)."""
        model = read_sentence_model(path)
        if model is None or len(model.pool) != 1 or model.pool[0] not in ("mean", "cls", "max"):
            return None
        return dataclasses.replace(self, pooling=model.pool[0], normalize=model.normalize)

    def teacher_outputs(self, model, batch, items) -> list:
        return self.infer(model, batch, items)  # each column's vector [D] per row

    def taught_loss(self, model, batch, settings, project=None) -> torch.Tensor:
        """MSE of each column's vectors (projected to the teacher's width where it differs) to
        the teacher's, mixed with the task's own loss."""
        columns = self.columns(model, batch)
        project = project or (lambda v: v)
        taught = sum(distillation.vector_mse(project(mine), theirs.to(mine.device))
                     for mine, theirs in zip(columns, batch["teacher"])) / len(columns)
        own = (columns, batch.get("labels"))
        if self.gather_across_devices:  # the task's own loss over the whole batch
            own = gathered(*own, batch.get(RANK_ROWS))
        return distillation.mixed(settings.alpha, taught, self.loss_of(*own))

    def decode_outputs(self, outputs, items, examples) -> list:
        """Per example its texts' vectors (None for an example not scored on dev)."""
        return _per_example(examples, {it.example: out[0] for it, out in zip(items, outputs)})

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples, predictions) -> dict:
        chosen = [(ex, v) for ex, v in zip(examples, predictions) if v is not None and ex.dev]
        if not chosen:
            raise UserError("nothing to score: no scored pairs or pairs among the examples")
        dims = [None, *sorted(self.matryoshka_dims)]
        if chosen[0][0].score is not None:
            a, b = (torch.stack([v[c] for _, v in chosen]) for c in (0, 1))
            gold = torch.tensor([ex.score for ex, _ in chosen], dtype=torch.float64)
            out = {}
            for dim in dims:
                f = sts_figures(a, b, gold, dim=dim)
                end = "" if dim is None else f"@{dim}"
                out.update({f"spearman{end}": f.spearman, f"pearson{end}": f.pearson})
            return {**out, "pairs": len(chosen)}
        return self._retrieval(chosen, dims)

    def _retrieval(self, chosen, dims) -> dict:
        queries, passages, relevant = search_inputs(chosen)
        out = {}
        for dim in dims:
            figures = search_figures(queries, passages, relevant, dim=dim)
            end = "" if dim is None else f"@dim{dim}"
            out.update({k + end: v for k, v in figures.as_dict().items()})
        return {**out, "queries": len(chosen)}

    def selection(self, scores: dict) -> float:
        return scores["spearman"] if "spearman" in scores else scores["ndcg@10"]

    def baseline(self, train, test, start) -> dict:
        """The encoder before fine-tuning, pooled the same way: what training must improve
        on (a pretrained sentence model may already score well, and a few steps at too high
        a rate score below it)."""
        return {**start(), "predictor": "the model before fine-tuning"}

    def usage(self, out: str, data: str) -> tuple[str, str]:
        """A sentence-transformers directory, not a task model: `embed` gives its vectors."""
        return (f"bertkit embed --model {shlex.quote(out)} --input sentences.txt "
                f"--out vectors.npy",
                f"from bertkit import Embedder\n\n"
                f"Embedder.load({json.dumps(out)}).encode([\"a sentence\", \"another one\"])")

    def save_model(self, backbone, model, path: Path, **_) -> Path:
        """A sentence-transformers directory: the encoder, its tokenizer, the pooling and
        normalisation (no bertkit_task.json: it is an encoder, as `Embedder.load` reads it)."""
        files = sentence_model_files((self.pooling,), self.normalize, self.max_length,
                                     model.encoder.config.hidden_size)
        return hub.save_model(model.encoder, path, tokenizer=backbone.tokenizer,
                              extra_files=files)


def gathered(columns: Sequence[torch.Tensor], scores: torch.Tensor | None, rows: int | None
             ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """A batch's vectors (and scores) of every rank's share (`gather_rows`): the whole global
    batch, in its order, its loss then that of one process."""
    return ([gather_rows(c, rows) for c in columns],
            None if scores is None else gather_rows(scores, rows))


def _query_examples(queries: Sequence[sp.QueryPassages], train: bool) -> list[EmbedExample]:
    """A queries file's examples: each (query, relevant passage[, a negative in turn]) trains;
    each query with all its passages is scored on dev."""
    out = []
    for q in queries:
        for k, passage in enumerate(q.relevant):
            negative = (q.negatives[k % len(q.negatives)],) if q.negatives else ()
            out.append(EmbedExample((q.query, passage, *negative), None, q.source, train=train,
                                    dev=False))
        out.append(EmbedExample((q.query, *q.relevant, *q.negatives), None, q.source,
                                train=False, positives=len(q.relevant)))
    return out


def _dev_texts(examples) -> list[str]:
    """Every distinct text of the examples scored on dev, in the order first seen."""
    return list(dict.fromkeys(t for ex in examples if ex.dev for t in ex.texts))


def _per_example(examples, vectors: dict[int, torch.Tensor]) -> list:
    """Each dev example's vectors, from `vectors` by position in `_dev_texts`."""
    index = {t: i for i, t in enumerate(_dev_texts(examples))}
    return [tuple(vectors[index[t]] for t in ex.texts) if ex.dev else None for ex in examples]


def evaluate_sentence_model(embedder, path, batch_size: int = 64, progress: bool = False) -> dict:
    """The figures of a sentence model (anything with sentence-transformers' `encode`, such
    as an `Embedder`) on a labelled file: Spearman and Pearson of cosine against the scores
    of scored pairs (or an NLI file's relatedness); MRR@10, recall@1/10 and nDCG@10 of
    finding each query's relevant passages among every passage of a queries, pairs or
    triplets file. Each distinct text is encoded once; `progress`: the encoding's on stderr
    (`show_progress_bar`, asked only then: an ONNX runner's `encode` has no such argument)."""
    task = Embed()
    examples = [ex for ex in task.read(path) if ex.dev]
    if not examples:
        raise UserError(f"{path}: nothing to score (expected scored pairs, pairs, triplets, "
                        f"queries or an NLI file)")
    shown = {"show_progress_bar": True} if progress else {}
    vectors = torch.from_numpy(embedder.encode(_dev_texts(examples), batch_size=batch_size,
                                               **shown))
    return task.score(examples, _per_example(examples, dict(enumerate(vectors))))


__all__ = ["Embed", "EmbedExample", "SentenceEncoder", "LOSSES", "evaluate_sentence_model"]
