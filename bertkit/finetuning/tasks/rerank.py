"""Reranking: a cross-encoder that reads a query and a passage together, [CLS] query [SEP]
passage [SEP], and gives one relevance logit, the head of BertForSequenceClassification with
one output. It reads the files `finetune embed` reads (`bertkit.finetuning.sentence_pairs`):

| file | a query's relevant passages / negatives | loss (`auto`) |
|---|---|---|
| pairs `anchor,positive` | its positives / the positives of the queries after it | listwise |
| triplets `anchor,positive,negative` | its positives / its negatives | listwise |
| queries `query,relevant[,negatives]` | `relevant` / `negatives` | listwise |
| NLI `premise,hypothesis,label` | entailments / contradictions | listwise |
| scored pairs `sentence1,sentence2,score` | the score as a soft label in [0, 1] | bce |

Rows are grouped by query. A query with no negative in the file borrows the relevant passages
of the `BORROWED_NEGATIVES` queries after it (cyclically), so that a file of pairs still has
something to tell apart. Training rows: each relevant passage with `negatives` of its query's
negatives, taken in turn. `bce` learns every pair of the rows (relevant 1, negative 0),
`listwise` each row's softmax over its positive and negatives (with `in_batch_negatives` also
that many of the other rows' positives, drawn per batch), `margin-mse` the margin
s(q, p+) - s(q, p-) that `teacher` gives each (positive, negative) of the rows
(`bertkit.finetuning.ranking`).

A triplet's or an NLI file's negative is a hard negative of its own query, a contradiction of
the premise: a reranker that sees only those learns to spot that relation, not relevance, and
scores unrelated passages high. So those files take `IN_BATCH_NEGATIVES` of the batch's other
positives a row by default (`in_batch_negatives` None, resolved by `configure`). Each is one
more pair through the model a row; `mini_batch_size` bounds what a step holds at once.

On dev each query's candidates (its passages) are ranked by the logit: nDCG@10 (kept by) and
MRR@10; a file of single scored pairs gives BCE and accuracy instead (kept by -BCE). The model
is saved as transformers' BertForSequenceClassification with one label and identity as its
activation, which sentence-transformers' `CrossEncoder(DIR)` reads with the same logits.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Literal, Sequence

import torch

from bertkit.files import UserError
from bertkit.finetuning import ranking
from bertkit.finetuning import sentence_pairs as sp
from bertkit.finetuning.heads import (Parts, SequenceClassifier, load_task_model,
                                      read_task_file)
from bertkit.finetuning.inputs import Item, pad_inputs
from bertkit.finetuning.task import Defaults, Task, fitted, model_inputs, text_lines
from bertkit.model import hub
from bertkit.model.encoder import Encoder
from bertkit.model.kind import ModelKind, model_kind
from bertkit.runtime import resolve_device
from bertkit.text.tokenizer import Tokenizer

LOSSES = ("bce", "listwise", "margin-mse")
IN_BATCH_NEGATIVES = 4
"""In-batch negatives a row of triplets or NLI takes by default: sentence-transformers'
default `num_negatives` of its cross-encoder MultipleNegativesRankingLoss."""
BORROWED_NEGATIVES = 9
"""Negatives a query without any borrows from the queries after it: with its relevant passage,
ten candidates, what nDCG@10 ranks."""
IDENTITY = "torch.nn.modules.linear.Identity"
"""sentence-transformers' name of the activation on the logit: none (its default for one
label is a sigmoid, whose scores would not be the logits)."""


@dataclass
class RerankExample:
    """A query, its candidate passages and, when labelled, each one's relevance in [0, 1]."""
    query: str
    passages: tuple[str, ...]
    labels: tuple[float, ...] | None = None
    source: str = ""
    """FILE:LINE of the query's first row"""

    def relevant(self) -> list[int]:
        """The indices of the relevant passages (label at least 0.5)."""
        return [i for i, label in enumerate(self.labels or ()) if label >= 0.5]

    def negatives(self) -> list[int]:
        return [i for i, label in enumerate(self.labels or ()) if label < 0.5]


@dataclass(frozen=True)
class RerankRow:
    """What a listwise or margin-mse training item holds beside its (query, positive) input:
    its negatives' inputs and, for negatives from the batch, the texts and a pair encoder."""
    query: str
    positive: str
    relevant: frozenset[str]
    """The query's relevant passages: never a negative of it, from the batch either."""
    negatives: tuple[tuple[list[int], list[int]], ...]
    """(ids, type_ids) of (query, negative) per negative."""
    encode_pairs: Callable | None = None
    """(queries, passages) -> their (ids, type_ids): pairs of the batch's rows."""


class RelevanceHead(SequenceClassifier):
    """BertForSequenceClassification with one output, saved as sentence-transformers' cross
    encoders are: one label, identity as the activation of its scores."""

    def __init__(self, encoder: Encoder, pooling: str = "cls", parts: Parts | None = None):
        super().__init__(encoder, 1, "regression", pooling, parts)

    def hf_config(self) -> dict:
        # no problem_type: transformers would take "regression" for a regression model
        return {"num_labels": 1, "sentence_transformers": {"activation_fn": IDENTITY}}


CROSS_FIRST = "cross_first"
"""A rank's share of a batch under torchrun: the batch row of its first row (its cross pairs'
own positive is column first + i)."""


@dataclass(frozen=True)
class Rerank(Task):
    """A cross-encoder reranker: one relevance logit per (query, passage)."""
    name: ClassVar[str] = "rerank"
    defaults: ClassVar[Defaults] = Defaults(epochs=1, batch_size=16, max_length=256,
                                            lr=2e-5, small_model_lr=2e-4)
    verb: ClassVar[str] = "rerank"
    pipeline_tag: ClassVar[str] = "text-ranking"
    library_name: ClassVar[str] = "sentence-transformers"
    card_tags: ClassVar[tuple[str, ...]] = ("sentence-transformers", "cross-encoder",
                                            "reranker")  # as CrossEncoder's own cards
    memory_advice: ClassVar[str] = ("lower --batch-size, --max-length, --negatives or "
                                    "--in-batch-negatives, or run the pairs a chunk at a time, "
                                    "--mini-batch-size N")

    objective: Literal["auto", "bce", "listwise", "margin-mse"] = dataclasses.field(
        default="auto", metadata={"flag": "loss"})
    """auto: margin-mse with --teacher, else bce for scored pairs, listwise for pairs,
    triplets, queries and NLI files."""
    negatives: int = 4
    """Negatives per relevant passage in a training row, a query's own taken in turn."""
    in_batch_negatives: int | None = dataclasses.field(default=None, metadata={"metavar": "N"})
    """listwise: N of the batch's other positives drawn at random as negatives of each row
    (all of them where fewer; 0: off), N more pairs through the model a row; none: 4 for
    triplets and NLI files, 0 for pairs and queries. A triplet's negative (an NLI file's
    contradiction) is a hard negative of its own query: trained on those alone, a reranker
    learns to spot that relation, not relevance, and scores unrelated passages high."""
    mini_batch_size: int | None = dataclasses.field(default=None, metadata={"metavar": "N"})
    """Run a step's pairs through the model N at a time, each chunk's activations recomputed
    in the backward pass, so that memory holds one chunk's (as GradCache, Gao et al. 2021):
    the same gradients for a second forward pass; none: all at once."""
    teacher: str | None = None
    """margin-mse: a reranker directory (its logits) or a sentence encoder (its cosines)
    whose margins s(q, p+) - s(q, p-) are learned."""
    score_range: tuple[float, ...] = ()
    """LOW HIGH of scored pairs' scores, brought to 0..1 as bce's soft labels (none: the
    scores must be in 0..1)."""
    kind: str = fitted("")
    """What the training file holds (sentence_pairs.detect_kind)."""
    pooling: str | None = fitted(None)
    """What the head reads: [CLS] through the pooler (a "bert" encoder), or the tokens' mean
    (a "modern" one, whose pretraining never trains [CLS])."""

    # Settings -----------------------------------------------------------------------------------
    def configure(self, train_path: Path) -> "Rerank":
        kind = sp.detect_kind(train_path)
        if kind == "sentences":
            raise UserError(f"{train_path}: a reranker learns from pairs, triplets, queries, "
                            f"scored pairs or an NLI file, not sentences")
        objective = self.objective if self.objective != "auto" else self._auto_loss(kind)
        in_batch = self._in_batch(kind, objective)
        if kind == "scored" and objective != "bce":
            raise UserError(f"{train_path}: scored pairs train --loss bce, not {objective} "
                            f"(which needs negatives)")
        if objective == "margin-mse" and not self.teacher:
            raise UserError("--loss margin-mse learns a teacher's margins: name it, --teacher DIR")
        if self.teacher and objective != "margin-mse":
            raise UserError(f"--teacher is read by --loss margin-mse, not {objective}")
        if self.negatives < 1:
            raise UserError(f"--negatives must be at least 1, got {self.negatives}")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise UserError(f"--mini-batch-size must be at least 1, got {self.mini_batch_size}")
        if self.score_range and len(self.score_range) != 2:
            raise UserError(f"--score-range takes LOW HIGH, got {len(self.score_range)} values")
        if self.teacher:
            teacher_task(self.teacher)  # a teacher of another kind refused before training
        return dataclasses.replace(self, objective=objective, kind=kind,
                                   in_batch_negatives=in_batch)

    def _auto_loss(self, kind: str) -> str:
        """A teacher's margins when given one; else scored pairs pointwise, and a query's
        passages (pairs, triplets, queries, NLI) as lists."""
        if self.teacher:
            return "margin-mse"
        return "bce" if kind == "scored" else "listwise"

    def _in_batch(self, kind: str, objective: str) -> int:
        """The in-batch negatives a row takes: as given, else IN_BATCH_NEGATIVES where the
        file's negatives are hard negatives of their own query (triplets, NLI) and the loss
        reads them (listwise); pairs borrow other queries' positives already, and queries
        name their own negatives."""
        if self.in_batch_negatives is None:
            return IN_BATCH_NEGATIVES if objective == "listwise" and \
                kind in ("triplets", "nli") else 0
        if self.in_batch_negatives < 0:
            raise UserError(f"--in-batch-negatives must be 0 or more, got "
                            f"{self.in_batch_negatives}")
        if self.in_batch_negatives and objective != "listwise":
            raise UserError(f"--in-batch-negatives is read by --loss listwise, not {objective}")
        return self.in_batch_negatives

    def for_backbone(self, model) -> "Rerank":
        if model.architecture is None:
            raise UserError("rerank trains a transformer encoder, not this backbone")
        return dataclasses.replace(self, pooling="mean" if model.architecture == "modern"
                                   else "cls")

    @classmethod
    def from_transformers(cls, config: dict) -> "Rerank | None":
        """A sentence-transformers cross-encoder's directory: one label and the
        activation of its scores recorded."""
        labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
        if (config.get("architectures") or [""])[0] != "BertForSequenceClassification" or \
                labels != 1:
            return None
        marked = "sentence_transformers" in config or \
            "sbert_ce_default_activation_function" in config
        return cls(pooling="cls") if marked else None

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list[RerankExample]:
        return self._examples(Path(path), labelled=True)

    def read_inputs(self, path) -> list[RerankExample]:
        """Pairs to score: a .txt file of QUERY<TAB>PASSAGE lines, or any file `read` reads
        (its passages scored as candidates, nothing borrowed)."""
        p = Path(path)
        lines = text_lines(p)
        if lines is None:
            return self._examples(p, labelled=False)
        if bad := next((k for t, k in zip(*lines) if "\t" not in t), None):
            raise UserError(f"{bad}: a rerank model reads a pair a line, QUERY<TAB>PASSAGE: "
                            f"this line has no tab")
        return [RerankExample(*_split_pair(text), source=key) for text, key in zip(*lines)]

    def _examples(self, path: Path, labelled: bool) -> list[RerankExample]:
        """The file's examples, a query each (a scored pair each); `labelled`: with their
        labels, and negatives borrowed where a query has none."""
        kind = sp.detect_kind(path)
        if kind == "sentences":
            raise UserError(f"{path}: a rerank model reads pairs of texts: pairs, triplets, "
                            f"queries, scored pairs, an NLI file or QUERY<TAB>PASSAGE lines")
        if kind == "scored":
            examples = self._scored(path, labelled)
        else:
            examples = _query_examples(_groups(path, kind), borrow=labelled)
        return examples if labelled else [dataclasses.replace(ex, labels=None)
                                          for ex in examples]

    def _scored(self, path: Path, labelled: bool) -> list[RerankExample]:
        limits = tuple(self.score_range) or None
        out = []
        for pair in sp.read_scored_pairs(path, score_range=limits):
            if labelled and not 0 <= pair.score <= 1:
                raise UserError(f"{pair.source}: score {pair.score:g} is no relevance in 0..1; "
                                f"give the scores' range, --score-range LOW HIGH")
            out.append(RerankExample(pair.text_a, (pair.text_b,), (pair.score,), pair.source))
        return out

    def with_labels(self, train, dev) -> "Rerank":
        if self.objective != "bce" and not self.in_batch_negatives and \
                not any(ex.relevant() and ex.negatives() for ex in train):
            raise UserError(f"{train[0].source.rsplit(':', 1)[0]}: no query with a relevant "
                            f"passage and a negative for --loss {self.objective}")
        return self

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False) -> list[Item]:
        if not training:
            return self._pair_items(tokenizer, examples)
        if self.objective == "bce":  # the pairs of the training rows
            return self._pair_items(tokenizer, [_row_pairs(ex, self.negatives)
                                                for ex in examples])
        return self._row_items(tokenizer, examples)

    def _pair_items(self, tokenizer, examples) -> list[Item]:
        """One item per (query, passage) of each example, its label the target."""
        flat = [(i, j) for i, ex in enumerate(examples) for j in range(len(ex.passages))]
        if not flat:
            return []
        enc = tokenizer.encode_batch([examples[i].query for i, _ in flat],
                                     [examples[i].passages[j] for i, j in flat],
                                     max_length=self.max_length, truncation="longest_first",
                                     with_offsets=False)
        return [Item(i, e.ids, e.type_ids, cut=bool(cut), extra=j,
                     target=None if examples[i].labels is None else float(examples[i].labels[j]))
                for (i, j), e, cut in zip(flat, enc, enc.cut)]

    def _row_items(self, tokenizer, examples) -> list[Item]:
        """One item per training row: (query, positive) its input, its negatives' in
        `RerankRow`; margin-mse: a row per (positive, negative), the teacher's margin its
        target."""
        rows = [(i, ex, ex.passages[r], [ex.passages[n] for n in negs])
                for i, ex in enumerate(examples) for r, negs in _rows(ex, self.negatives)]
        if self.objective == "margin-mse":
            rows = [(i, ex, pos, [neg]) for i, ex, pos, negs in rows for neg in negs]
        else:
            rows = [row for row in rows if row[3] or self.in_batch_negatives]
        if not rows:
            return []
        encode = functools.partial(_encode_pairs, tokenizer, self.max_length)
        positives = encode([ex.query for _, ex, _, _ in rows], [pos for _, _, pos, _ in rows])
        negatives = encode([ex.query for _, ex, _, negs in rows for _ in negs],
                           [n for *_, negs in rows for n in negs])
        margins = self._margins(rows) if self.objective == "margin-mse" else [None] * len(rows)
        items, start = [], 0
        for (i, ex, pos, negs), (ids, types, cut), margin in zip(rows, positives, margins):
            mine = negatives[start:start + len(negs)]
            start += len(negs)
            row = RerankRow(ex.query, pos, frozenset(ex.passages[r] for r in ex.relevant()),
                            tuple((n[0], n[1]) for n in mine),
                            encode if self.in_batch_negatives else None)
            items.append(Item(i, ids, types, target=margin, extra=row,
                              cut=cut or any(n[2] for n in mine)))
        return items

    def _margins(self, rows) -> list[float]:
        """The teacher's s(q, p+) - s(q, p-) of each (query, positive, [negative]) row."""
        score = teacher_scorer(self.teacher)
        queries = [ex.query for _, ex, _, _ in rows]
        margin = score(queries, [pos for _, _, pos, _ in rows]) - \
            score(queries, [negs[0] for *_, negs in rows])
        return margin.tolist()

    def collate(self, items) -> dict:
        """`training_batch`'s, training rows' in-batch negatives drawn by a generator seeded 0
        (a run draws each batch's from a generator of its own)."""
        return self.training_batch(items, torch.Generator().manual_seed(0))

    def training_batch(self, items, generator: torch.Generator, share=None) -> dict:
        """With in-batch negatives under torchrun, a share's queries meet the positives of the
        whole batch, as in one process, the whole batch's draw of them made on every rank:
        (query, passage) pairs are scored together, so a rank builds those of its rows."""
        if not isinstance(items[0].extra, RerankRow):
            batch = super().collate(items if share is None else [items[i] for i in share])
            if "labels" in batch:
                batch["labels"] = batch["labels"].float()
            return batch
        if share is None or items[0].extra.encode_pairs is None:
            return self._rows(items if share is None else [items[i] for i in share], generator)
        return {**self._rows([items[i] for i in share], generator, items, share[0]),
                CROSS_FIRST: share[0]}

    def _rows(self, items, generator: torch.Generator, batch_rows=None, first: int = 0) -> dict:
        """Rows of (query, positive, negatives) as one batch of pairs; with in-batch
        negatives, each row's query with positives of `batch_rows` (None: `items`) drawn from
        `generator`, in which row i is row `first + i`."""
        pairs, positive, negative = [], [], []
        for it in items:
            positive.append(len(pairs))
            pairs.append((it.ids, it.type_ids))
            negative.append(list(range(len(pairs), len(pairs) + len(it.extra.negatives))))
            pairs.extend(it.extra.negatives)
        width = max(len(n) for n in negative)
        batch = {"positive_index": torch.tensor(positive),
                 "negative_index": torch.tensor([n + [-1] * (width - len(n)) for n in negative],
                                                dtype=torch.long).view(len(items), width)}
        if items[0].extra.encode_pairs is not None:
            batch["cross_index"] = _cross_pairs(items, pairs, self.in_batch_negatives,
                                                generator, batch_rows or items, first)
        batch.update(pad_inputs([Item(0, ids, types) for ids, types in pairs]))
        if items[0].target is not None:
            batch["labels"] = torch.tensor([float(it.target) for it in items])
        return batch

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder, layer_mix: bool = False) -> RelevanceHead:
        return RelevanceHead(encoder, self.pooling or "cls", Parts(layer_mix=layer_mix))

    def loss(self, model, batch) -> torch.Tensor:
        logits = self._logits(model, batch)  # [N]
        if self.objective == "bce":
            return ranking.bce_loss(logits, batch["labels"])
        positive = logits[batch["positive_index"]]  # [B]
        index = batch["negative_index"]  # [B, K], -1 past a row's negatives
        negatives = logits[index.clamp(min=0)]
        if self.objective == "margin-mse":
            return ranking.margin_mse_loss(positive, negatives[:, 0], batch["labels"])
        cross = batch.get("cross_index")  # [B, B'], -1 where row j's positive is no negative
        return ranking.listwise_loss(
            positive, negatives, index >= 0,
            None if cross is None else logits[cross.clamp(min=0)],
            None if cross is None else cross >= 0, first=batch.get(CROSS_FIRST, 0))

    def target_count(self, batch) -> float:
        # the listwise and margin losses are means over queries, bce's over pairs
        return batch["positive_index"].shape[0] if "positive_index" in batch \
            else batch["input_ids"].shape[0]

    def step_inputs(self, batch_size: int) -> int:
        """The pairs of a step's rows (its positive, negatives and in-batch negatives each;
        bce: a pair an item), `mini_batch_size` of them at once where given."""
        per_row = 1 if self.objective == "bce" else 2 if self.objective == "margin-mse" \
            else 1 + self.negatives + (self.in_batch_negatives or 0)
        return min(batch_size * per_row, self.mini_batch_size or batch_size * per_row)

    def _logits(self, model, batch) -> torch.Tensor:
        """The logit of each of the batch's pairs [N]: `mini_batch_size` at a time where
        training (nothing to recompute otherwise)."""
        inputs = model_inputs(batch)
        size = self.mini_batch_size
        if size and torch.is_grad_enabled() and len(inputs[0]) > size:
            return ranking.chunked_logits(model, inputs, size)
        return model(*inputs)[:, 0]

    def infer(self, model, batch, items) -> list:
        return list(model(*model_inputs(batch))[:, 0].float().cpu().unbind(0))

    def decode_outputs(self, outputs, items, examples) -> list[tuple[float, ...]]:
        """Per example, the logit of each of its passages."""
        scores: list[list[float]] = [[] for _ in examples]
        for it, out in zip(items, outputs):  # an example's items in its passages' order
            scores[it.example].append(float(out))
        return [tuple(s) for s in scores]

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples, predictions) -> dict:
        labelled = [(ex, p) for ex, p in zip(examples, predictions) if ex.labels is not None]
        if not labelled:
            raise UserError("nothing to score: the examples have no labels")
        ranked = [(ex, p) for ex, p in labelled if len(ex.passages) > 1 and ex.relevant()]
        out = ranking.ranking_figures([torch.tensor(p) for _, p in ranked],
                                      [ex.relevant() for ex, _ in ranked]) if ranked else {}
        logits = torch.tensor([s for _, p in labelled for s in p])
        labels = torch.tensor([label for ex, _ in labelled for label in ex.labels])
        return {**out, **ranking.pointwise_figures(logits, labels)}

    def selection(self, scores: dict) -> float:
        return scores["ndcg@10"] if "ndcg@10" in scores else -scores["bce"]

    def selection_name(self, scores: dict) -> str:
        return "ndcg@10" if "ndcg@10" in scores else "-bce"

    def save_model(self, backbone, model, path: Path, *, tokenizer=None, labels=None) -> Path:
        """As other tasks save, the tokenizer's model_max_length the task's max_length: what a
        CrossEncoder (and a transformers tokenizer told to truncate) cuts a pair to, so that
        it scores a long pair as bertkit does."""
        if tokenizer is not None:
            tokenizer = copy.copy(tokenizer)
            tokenizer.model_max_length = self.max_length
        return super().save_model(backbone, model, path, tokenizer=tokenizer, labels=labels)

    # Use ----------------------------------------------------------------------------------------
    def pipeline(self, runner, pairs):
        """[{"score"}] per (query, passage) pair: the relevance logit; one pair, one dict."""
        single = isinstance(pairs, tuple) and len(pairs) == 2 and isinstance(pairs[0], str)
        pairs = [pairs] if single else list(pairs)
        out = [{"score": s[0]} for s in runner.predict([RerankExample(q, (p,))
                                                         for q, p in pairs])]
        return out[0] if single else out

    def prediction_rows(self, runner, path) -> list[dict]:
        examples = self.read_inputs(path)
        return [{"query": ex.query, "passage": passage, "score": score}
                for ex, scores in zip(examples, runner.predict(examples))
                for passage, score in zip(ex.passages, scores)]


# Reading ----------------------------------------------------------------------------------------

def _split_pair(line: str) -> tuple[str, tuple[str]]:
    query, passage = line.split("\t", 1)
    return query, (passage,)


def _groups(path: Path, kind: str) -> list[tuple[str, tuple, tuple, str]]:
    """(query, relevant passages, negatives, FILE:LINE of its first row) per query, in the
    order first seen: the rows of a file of pairs, triplets, queries or NLI."""
    if kind == "queries":
        return [(q.query, q.relevant, q.negatives, q.source) for q in sp.read_queries(path)]
    if kind == "nli":
        nli = sp.read_nli(path)  # entailments and contradictions; relatedness unread
        rows = [(t.anchor, t.positive, t.negative, t.source) for t in nli.triplets] + \
            [(p.anchor, p.positive, None, p.source) for p in nli.pairs]
        if not rows:
            raise UserError(f"{path}: no entailment to learn relevance from")
    elif kind == "triplets":
        rows = [(t.anchor, t.positive, t.negative, t.source) for t in sp.read_triplets(path)]
    else:
        rows = [(p.anchor, p.positive, None, p.source) for p in sp.read_pairs(path)]
    found: dict[str, tuple[dict, dict, str]] = {}
    for query, positive, negative, source in rows:
        relevant, negatives, _ = found.setdefault(query, ({}, {}, source))
        relevant[positive] = None
        if negative is not None:
            negatives[negative] = None
    return [(q, tuple(rel), tuple(n for n in neg if n not in rel), source)
            for q, (rel, neg, source) in found.items()]


def _query_examples(groups, borrow: bool) -> list[RerankExample]:
    """An example per query: its relevant passages (label 1) then its negatives (0); with
    `borrow`, a query with none takes the first relevant passages of the queries after it."""
    out = []
    for n, (query, relevant, negatives, source) in enumerate(groups):
        if not negatives and borrow:
            others = (groups[(n + k) % len(groups)][1][0] for k in range(1, len(groups)))
            negatives = tuple(dict.fromkeys(p for p in others if p not in relevant)
                              )[:BORROWED_NEGATIVES]
        out.append(RerankExample(query, (*relevant, *negatives),
                                 (1.0,) * len(relevant) + (0.0,) * len(negatives), source))
    return out


def _rows(ex: RerankExample, per_row: int) -> list[tuple[int, list[int]]]:
    """(relevant passage, its negatives) per relevant passage of `ex`: `per_row` of the
    query's negatives, the k-th row starting k * per_row along them, so that rows of one
    query see different ones."""
    negatives = ex.negatives()
    take = min(per_row, len(negatives))
    return [(r, [negatives[(k * per_row + j) % len(negatives)] for j in range(take)])
            for k, r in enumerate(ex.relevant())]


def _row_pairs(ex: RerankExample, per_row: int) -> RerankExample:
    """`ex` with only the passages its training rows hold (a scored pair as it is)."""
    if len(ex.passages) == 1:
        return ex
    kept = sorted({i for r, negs in _rows(ex, per_row) for i in (r, *negs)})
    return RerankExample(ex.query, tuple(ex.passages[i] for i in kept),
                         tuple(ex.labels[i] for i in kept), ex.source)


def _encode_pairs(tokenizer, max_length: int, queries: Sequence[str],
                  passages: Sequence[str]) -> list[tuple[list[int], list[int], bool]]:
    """(ids, type_ids, cut) of each (query, passage), as `Rerank.encode` encodes a pair."""
    if not queries:
        return []
    enc = tokenizer.encode_batch(list(queries), list(passages), max_length=max_length,
                                 truncation="longest_first", with_offsets=False)
    return [(e.ids, e.type_ids, bool(cut)) for e, cut in zip(enc, enc.cut)]


def _cross_pairs(items: Sequence[Item], pairs: list, count: int, generator: torch.Generator,
                 batch: Sequence[Item], first: int = 0) -> torch.Tensor:
    """[B, B']: where in `pairs` (appended to here) (query i, positive of row j of `batch`) is,
    for `count` rows j drawn from `generator` among those that may be a negative of row i
    (another query, a passage not relevant to it); -1 elsewhere. Row i of `items` is row
    `first + i` of `batch` (a rank's share, which draws as the whole batch does)."""
    rows, others = [it.extra for it in items], [it.extra for it in batch]
    allowed = torch.tensor([[i != j and a.query != b.query and b.positive not in a.relevant
                             for j, b in enumerate(others)] for i, a in enumerate(others)],
                           dtype=torch.bool)
    drawn = ranking.sample_in_batch(allowed, count, generator)[first:first + len(rows)]
    wanted = drawn.nonzero().tolist()
    index = torch.full((len(rows), len(others)), -1, dtype=torch.long)
    encoded = rows[0].encode_pairs([rows[i].query for i, _ in wanted],
                                   [others[j].positive for _, j in wanted])
    for (i, j), (ids, types, _) in zip(wanted, encoded):
        index[i, j] = len(pairs)
        pairs.append((ids, types))
    return index


# A teacher --------------------------------------------------------------------------------------

def teacher_task(path: str | Path) -> Rerank | None:
    """The reranker task of a teacher directory, None for a sentence encoder; a model of any
    other kind (a classifier, ...) is a one-line UserError."""
    p = hub.resolve_model(path)
    kind = model_kind(p)
    if kind is ModelKind.ENCODER:
        return None
    data = read_task_file(p) if kind is ModelKind.TASK else None
    if data is not None and data.get("task") == Rerank.name:
        return Rerank.from_json(data)
    config = hub.load_config(p) if kind is ModelKind.TASK else None
    task = None if config is None or data is not None else Rerank.from_transformers(config.extra)
    if task is not None:
        return task.with_overrides(max_length=min(512, config.max_positions))
    what = f"a fine-tuned {data.get('task')} model" if data else kind.value
    raise UserError(f"{p}: {what}, not a reranker or a sentence encoder (--teacher)")


def teacher_scorer(path: str | Path, batch_size: int = 64) -> ranking.PairScorer:
    """The teacher of `path` as a scorer of (query, passage) pairs: a reranker's logit, or a
    sentence encoder's cosine; on the GPU when there is one."""
    task, device = teacher_task(path), resolve_device("auto")
    p = hub.resolve_model(path)
    if task is None:
        from bertkit.embeddings.embedder import Embedder  # a sentence encoder's teacher only

        return ranking.cosine_scorer(Embedder.load(p, device=device), batch_size)
    model = load_task_model(task, p, device)
    tokenizer = Tokenizer.load(p)
    return lambda queries, passages: ranking.model_scores(
        model, task, tokenizer, [RerankExample(q, (x,)) for q, x in zip(queries, passages)],
        device, batch_size)


__all__ = ["Rerank", "RerankExample", "RerankRow", "RelevanceHead", "LOSSES",
           "IN_BATCH_NEGATIVES", "BORROWED_NEGATIVES", "teacher_task", "teacher_scorer"]
