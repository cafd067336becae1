"""Pretraining examples and batches from a prepared corpus (`bertkit prepare`).

    batches = PretrainingBatches("data/", objective="mlm", seq_len=128, batch_size=32)
    for batch in batches: ...          # endless; batches.state_dict() resumes exactly

Examples, rebuilt for every epoch from (seed, epoch):
- "mlm" (RoBERTa, FULL-SENTENCES): the split's documents as one stream, each document followed
  by an extra [SEP], cut into [CLS] + (seq_len - 2) tokens + [SEP]: every row is full and rows
  cross document boundaries. With row_ends="sentence" (the default) each row's text ends where
  a sentence ends, as every text a model meets later ends before its [SEP]: row k ends at the
  first sentence end at least seq_len - 2 tokens past row k-1's end (or, with none in the
  next seq_len - 2 tokens, just there), so the text between is left out of that epoch (about
  a fifth of it at 64 tokens a row, a different part each epoch as the first end shifts). With "anywhere" the rows tile the stream back to back. Either way
  the rows shift by a random offset each epoch. With "whole-sentences" (RoBERTa's
  FULL-SENTENCES) each row also starts where a sentence starts: as many whole sentences as fit,
  then padding (about a fifth of a 64-token row on books), and no text left out.
- "clm": the same packed rows, with next-token labels and no masking (left-to-right baseline).
- With `document_boundaries` (mlm, clm, electra: packed rows) each batch also says which
  document each position of a row is from (`document_ids`), and the model runs each document
  of a row as if alone: attention stays inside it and its positions start at 0, as
  transformers' DataCollatorWithFlattening packs. [CLS] belongs to the row's first document,
  the closing [SEP] and any padding to its last; a document cut between two rows starts again
  at position 0 in the second. clm does not predict the next document's first token from the
  [SEP] that ends a document (as a document run alone has nothing after it).
- "electra": the rows and masks of "mlm", and one uniform number per prediction with which
  ELECTRA's generator samples its replacement (`pretraining/electra.py`).
- "mlm+nsp" (BERT): [CLS] A [SEP] B [SEP] pairs made by the original create_instances_from_
  document: per document a target length (seq_len - 3, or with `short_seq_prob` a random one
  in [2, seq_len - 3]); sentences gathered until the target; A = the first 1..n-1 of them;
  B = the rest (label 0, "is next") or, with probability 1/2 or when the chunk is one sentence,
  sentences from a random other document (label 1, the unused sentences are put back); then
  truncate_seq_pair: trim the longer segment one token at a time from the front or the back.
- "span" (SpanBERT): single contiguous segments inside one document, [CLS] + up to
  seq_len - 2 tokens + [SEP], with span masking.

Each epoch's examples are shuffled; a batch's masks are drawn when it is built (dynamic masking:
a sequence seen again gets fresh masks) from a torch.Generator whose state, with the epoch and
the cursor, is the iterator's state: `load_state_dict(state_dict())` continues with exactly the
batches an uninterrupted run would have produced.

Distributed: with `world_size` ranks, every rank builds the same global batch of
batch_size * world_size rows (same examples, same masks: the generator draws for the global
batch) and keeps rows [rank * batch_size, (rank + 1) * batch_size). So the ranks' batches are
disjoint shares whose union is exactly the batch a single process with batch_size * world_size
(and world_size 1) gets, row for row; each rank's prediction buffer (N below) is sized for its
own rows. Building the global batch costs each rank a memmap gather and a vectorised mask draw.

Each batch is a dict of CPU tensors:
    input_ids, token_type_ids   [B, T] long
    attention_mask [B, T] long, only when some row is padded (left out of full batches)
    num_tokens     int, the real tokens of the batch
    mlm_positions [N] flat indices into B*T of the selected tokens, mlm_labels [N] their
        original ids; N = round(B * T * mlm_prob) rounded up to a multiple of 8 (static
        shapes; with mlm_prob_final, the larger of the two rates); unused entries point at
        position 0 with label -100, surplus selections are dropped (rare: the per-row count
        is round(n * mlm_prob) of n <= T - 2 tokens)
    nsp_labels [B]                              mlm+nsp: 0 = B follows A, 1 = B is random
    span_left, span_right, span_offset [N]      span: flat indices of the boundary tokens
        x_{s-1}, x_{e+1} of the span of each target and its 0-based offset in the span
    clm_labels [B, T]                           clm: next token, -100 after the last one
    document_ids [B, T]         document_boundaries: each position's document, numbered from
        0 along its row; only in batches where some row holds more than one
    sample_uniform [N]                          electra: uniform in [0, 1), the sample's draw
    num_tokens int                              non-padding tokens (for tokens/s)
"""
from __future__ import annotations

import bisect
import math
import queue
import sys
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertkit.pretraining.shards import load_array, load_manifest, load_split, verify_shards
from bertkit.files import UserError
from bertkit.model.heads import IGNORE_INDEX
from bertkit.pretraining.masking import (MaskingConfig, mask_tokens, mlm_prob_at, sampling_probs,
                                         span_mask, special_tokens_mask, whole_word_mask)
from bertkit.pretraining.electra import draw_uniform
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.objectives import objective_named

ROW_ENDS = ("sentence", "anywhere", "whole-sentences")
"""Where the text of a packed mlm / clm row ends: at a sentence end, anywhere, or at a sentence
end of a row that also starts at a sentence start (padded)."""


@dataclass
class _Plan:
    """One epoch's examples in shuffled order, as ranges of the split's token stream."""
    order: np.ndarray
    """int64 [E'] example index of each slot (E' >= E when an epoch must fill one batch)."""
    a_start: np.ndarray
    a_len: np.ndarray
    b_start: np.ndarray | None = None
    b_len: np.ndarray | None = None
    nsp_label: np.ndarray | None = None


class PretrainingBatches:
    """Endless, resumable, rank-sliced batches of one objective; see the module docstring."""

    def __init__(self, data_dir, *, objective: str | Objective, seq_len: int, batch_size: int,
                 split: str = "train", seed: int = 0, rank: int = 0, world_size: int = 1,
                 masking: MaskingConfig | None = None, short_seq_prob: float = 0.1,
                 prefetch: int = 2, row_ends: str = "sentence",
                 document_boundaries: bool = False, verify: bool = True):
        objective = objective_named(objective)
        if row_ends not in ROW_ENDS:
            raise UserError(f"row ends must be one of {', '.join(ROW_ENDS)}, got {row_ends!r}")
        if document_boundaries and objective.examples.rows != "packed":
            raise UserError(f"document boundaries are kept in rows packed from several "
                            f"documents; --objective {objective.name}'s rows are not packed")
        if seq_len < 8:
            raise UserError(f"sequence length {seq_len} is too short (at least 8)")
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise UserError(f"bad batch_size {batch_size} / rank {rank} / world_size {world_size}")
        self.data_dir = Path(data_dir)
        manifest = load_manifest(data_dir)
        self.shape = objective.examples
        self.objective, self.seq_len, self.batch_size = objective.name, seq_len, batch_size
        self.split, self.seed, self.rank, self.world_size = split, seed, rank, world_size
        self.global_batch = batch_size * world_size
        self.masking = masking or MaskingConfig()
        self.short_seq_prob = short_seq_prob
        self.row_ends = row_ends
        self.document_boundaries = document_boundaries
        # A batch built ahead would mask at the rate of an earlier step: with a rate that
        # changes during the run, each is built when it is taken (on 2 CPU cores a 12-minute
        # run so built trained within 0.5% of the steps of one prefetching).
        self.prefetch = 0 if self.masking.mlm_prob_final is not None else prefetch
        self.progress = 0.0
        """How far the run is (0 to 1), from the training loop; sets a scheduled masking rate."""
        tok = manifest["tokenizer"]
        self.vocab_size = tok["vocab_size"]
        ids = tok["special_ids"]
        self.cls_id, self.sep_id, self.pad_id, self.mask_id = (
            ids["cls"], ids["sep"], ids["pad"], ids["mask"])
        self.special_ids = sorted(set(ids.values()))
        top_rate = max(self.masking.mlm_prob, self.masking.mlm_prob_final or 0.0)
        self.num_predictions = 8 * math.ceil(round(batch_size * seq_len * top_rate) / 8)
        """N: entries of mlm_positions / mlm_labels in every batch of this rank."""
        # once per run, before training reads the shards (`verify` off: checked already)
        if split == "train" and rank == 0 and verify:
            verify_shards(data_dir)
        self.word_starts = torch.from_numpy(load_array(self.data_dir / manifest["word_starts"]))
        counts = load_array(self.data_dir / manifest["token_counts"])
        self.sampling_probs = sampling_probs(counts, self.vocab_size, self.special_ids,
                                             uniform=self.masking.uniform_random)
        self._index_split(load_split(data_dir, split))
        self._code = zlib.crc32(f"{self.objective}/{split}".encode())
        first = self._plan(0)
        if len(first.a_start) == 0:
            raise UserError(f"{data_dir}: the {split} split has no text to make examples from")
        self.num_sequences = len(first.a_start)
        """Examples in an epoch (for ETA; it varies by a few between epochs)."""
        self._cache = (0, first)
        g = torch.Generator().manual_seed(seed * 1_000_003 + self._code)
        self._state = {"epoch": 0, "cursor": 0, "generator": g.get_state()}

    # The split as one stream of tokens ------------------------------------------------------
    def _index_split(self, split) -> None:
        self.shards = split.shards
        first_sentence = split.doc_sentences[:-1]
        self.doc_len = np.add.reduceat(split.sentence_length, first_sentence) \
            if len(first_sentence) else np.zeros(0, np.int64)
        self.doc_shard = split.sentence_shard[first_sentence]
        self.doc_token = split.sentence_start[first_sentence]
        # stream: document 0, [SEP], document 1, [SEP], ...
        self.doc_stream = np.concatenate([[0], np.cumsum(self.doc_len + 1)]).astype(np.int64)
        sentence_doc = np.repeat(np.arange(len(self.doc_len)), np.diff(split.doc_sentences))
        self.sentence_stream = (self.doc_stream[:-1][sentence_doc] + split.sentence_start
                                - self.doc_token[sentence_doc])
        self.sentence_length = split.sentence_length
        self.doc_sentences = split.doc_sentences

    def _fetch(self, pos: np.ndarray) -> np.ndarray:
        """Token ids at stream positions (any shape); a document's end reads as [SEP]."""
        doc = np.searchsorted(self.doc_stream, pos, side="right") - 1
        within = pos - self.doc_stream[doc]
        text = within < self.doc_len[doc]
        out = np.full(pos.shape, self.sep_id, dtype=np.int64)
        where = self.doc_token[doc] + within
        shard = self.doc_shard[doc]
        for s in np.unique(shard[text]) if len(self.shards) > 1 else [0]:
            m = text & (shard == s) if len(self.shards) > 1 else text
            out[m] = self.shards[s][where[m]]
        return out

    # Examples of one epoch ------------------------------------------------------------------
    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, self._code])

    def _plan(self, epoch: int) -> _Plan:
        rng = self._rng(epoch)
        L = self.seq_len - 2
        if self.shape.rows == "packed":
            total = int(self.doc_stream[-1])
            shift = int(rng.integers(0, L)) if total >= 2 * L else 0
            if self.row_ends == "whole-sentences":
                starts, lengths = self._whole_sentence_rows(L)
            else:
                starts = (self._sentence_end_rows(shift + L, L, total) - L
                          if self.row_ends == "sentence"
                          else shift + L * np.arange((total - shift) // L, dtype=np.int64))
                lengths = np.full(len(starts), L, dtype=np.int64)
            n = len(starts)
            plan = _Plan(np.zeros(0, np.int64), starts, lengths)
            if n == 0 and total > 0:  # less text than one row: one padded row
                plan = _Plan(np.zeros(0, np.int64), np.zeros(1, np.int64),
                             np.full(1, total, dtype=np.int64))
        elif self.shape.rows == "documents":
            blocks = -(-self.doc_len // L)
            doc = np.repeat(np.arange(len(self.doc_len)), blocks)
            j = np.arange(len(doc)) - np.repeat(np.cumsum(blocks) - blocks, blocks)
            start = self.doc_stream[doc] + j * L
            plan = _Plan(np.zeros(0, np.int64), start,
                         np.minimum(L, self.doc_len[doc] - j * L))
        else:
            plan = self._nsp_plan(rng)
        n = len(plan.a_start)
        order = rng.permutation(n)
        if 0 < n < self.global_batch:  # a small split still gives one full batch per epoch
            order = np.resize(order, self.global_batch)
        plan.order = order
        return plan

    def _sentence_end_rows(self, first: int, L: int, total: int) -> np.ndarray:
        """Stream positions just past the last token of each row: the first sentence end at or
        after `first`, then each time the first one at least L tokens further; where no
        sentence ends within the next L tokens (a sentence longer than a row, text without
        sentence ends) the row ends L tokens further, wherever that is."""
        ends = (self.sentence_stream + self.sentence_length).tolist()  # sorted: stream order
        chosen, e = [], first
        while e <= total:
            i = bisect.bisect_left(ends, e)
            end = ends[i] if i < len(ends) and ends[i] < e + L else e
            chosen.append(end)
            e = end + L
        return np.asarray(chosen, dtype=np.int64)

    def _whole_sentence_rows(self, L: int) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) in the stream of rows of whole sentences: from a sentence start as
        many as fit in L tokens (RoBERTa's FULL-SENTENCES, fairseq's break mode "complete"),
        the rest of the row padded; a sentence longer than a row is cut into rows of L. The
        same rows every epoch (nothing is left out to vary), in another order."""
        starts = self.sentence_stream.tolist()
        ends = (self.sentence_stream + self.sentence_length).tolist()
        rows, lengths, p = [], [], starts[0] if starts else 0
        while starts:
            j = bisect.bisect_right(ends, p + L) - 1  # the last sentence that ends in the row
            whole = j >= 0 and ends[j] > p
            rows.append(p)
            lengths.append(ends[j] - p if whole else L)
            if not whole:
                p += L
            elif j + 1 < len(starts):
                p = starts[j + 1]  # past the document's [SEP] where one ends here
            else:
                break
        return np.asarray(rows, dtype=np.int64), np.asarray(lengths, dtype=np.int64)

    def _nsp_plan(self, rng: np.random.Generator) -> _Plan:
        """BERT's create_instances_from_document over all documents, then truncate_seq_pair
        for all pairs at once. Sentence boundaries come from bisect on cumulative lengths."""
        max_tokens = self.seq_len - 3
        lengths = self.sentence_length
        cum = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        bounds = self.doc_sentences.tolist()
        n_docs = len(bounds) - 1
        a0, a1, b0, b1, label = [], [], [], [], []
        for d in range(n_docs):
            first, last = bounds[d], bounds[d + 1]
            target = max_tokens
            if rng.random() < self.short_seq_prob:
                target = int(rng.integers(2, max_tokens + 1))
            i = first
            while i < last:
                # chunk = sentences i..j (inclusive): until the target is reached or doc ends
                j = min(bisect.bisect_left(cum, cum[i] + target, lo=i + 1) - 1, last - 1)
                n = j - i + 1
                a_end = i + 1 if n < 2 else int(rng.integers(i + 1, j + 1))
                if n == 1 or rng.random() < 0.5:
                    other = d if n_docs == 1 else int(rng.integers(0, n_docs - 1))
                    other += other >= d and n_docs > 1
                    o_first, o_last = bounds[other], bounds[other + 1]
                    start = int(rng.integers(o_first, o_last))
                    want = max(1, target - (cum[a_end] - cum[i]))
                    end = min(bisect.bisect_left(cum, cum[start] + want, lo=start + 1),
                              o_last)
                    b0.append(start), b1.append(end), label.append(1)
                    next_i = a_end  # the unused sentences of the chunk are put back
                else:
                    b0.append(a_end), b1.append(j + 1), label.append(0)
                    next_i = j + 1
                a0.append(i), a1.append(a_end)
                i = next_i
        a0, a1, b0, b1 = (np.asarray(x, dtype=np.int64) for x in (a0, a1, b0, b1))
        a_start, b_start = self.sentence_stream[a0] if len(a0) else a0, \
            self.sentence_stream[b0] if len(b0) else b0
        a_len = np.asarray(cum, dtype=np.int64)[a1] - np.asarray(cum, dtype=np.int64)[a0]
        b_len = np.asarray(cum, dtype=np.int64)[b1] - np.asarray(cum, dtype=np.int64)[b0]
        # truncate_seq_pair: the longer loses a token (B on ties) until they fit
        excess = np.maximum(a_len + b_len - max_tokens, 0)
        even = np.minimum(excess, np.abs(a_len - b_len))
        rest = excess - even
        cut_a = np.where(a_len > b_len, even, 0) + rest // 2
        cut_b = np.where(a_len > b_len, 0, even) + (rest + 1) // 2
        front_a = rng.binomial(cut_a, 0.5)  # each removed token: front or back alike
        front_b = rng.binomial(cut_b, 0.5)
        return _Plan(np.zeros(0, np.int64), a_start + front_a, a_len - cut_a,
                     b_start + front_b, b_len - cut_b, np.asarray(label, dtype=np.int64))

    def _epoch_plan(self, epoch: int) -> _Plan:
        cached_epoch, plan = self._cache
        if cached_epoch != epoch:
            plan = self._plan(epoch)
            self._cache = (epoch, plan)
        return plan

    def batches_in_epoch(self, epoch: int = 0) -> int:
        return len(self._epoch_plan(epoch).order) // self.global_batch

    def __len__(self) -> int:
        """Batches per epoch (of epoch 0; later ones differ by at most one)."""
        return self.batches_in_epoch(0)

    # Building one batch ---------------------------------------------------------------------
    def _rows(self, plan: _Plan, slots: np.ndarray):
        """ids, token types, attention mask [GB, T] (numpy) for the plan's examples."""
        T = self.seq_len
        ex = plan.order[slots]
        col = np.arange(T)[None, :]
        la = plan.a_len[ex][:, None]
        if plan.b_start is None:
            body = (col >= 1) & (col <= la)
            pos = plan.a_start[ex][:, None] + col - 1
            ids = np.full((len(ex), T), self.pad_id, dtype=np.int64)
            ids[body] = self._fetch(pos[body])
            ids[:, 0] = self.cls_id
            ids[np.arange(len(ex)), la[:, 0] + 1] = self.sep_id
            types = np.zeros_like(ids)
            attention = (col <= la + 1).astype(np.int64)
            return ids, types, attention
        lb = plan.b_len[ex][:, None]
        in_a = (col >= 1) & (col <= la)
        in_b = (col >= la + 2) & (col <= la + lb + 1)
        pos = np.where(in_a, plan.a_start[ex][:, None] + col - 1,
                       plan.b_start[ex][:, None] + col - la - 2)
        ids = np.full((len(ex), T), self.pad_id, dtype=np.int64)
        text = in_a | in_b
        ids[text] = self._fetch(pos[text])
        ids[:, 0] = self.cls_id
        rows = np.arange(len(ex))
        ids[rows, la[:, 0] + 1] = self.sep_id
        ids[rows, (la + lb)[:, 0] + 2] = self.sep_id
        types = ((col >= la + 2) & (col <= la + lb + 2)).astype(np.int64)
        attention = (col <= la + lb + 2).astype(np.int64)
        return ids, types, attention

    def _documents(self, plan: _Plan, slots: np.ndarray) -> torch.Tensor:
        """[GB, T] the document of each position of packed rows, numbered from 0 along each
        row: [CLS] is the first text token's, the closing [SEP] and padding the last's."""
        ex = plan.order[slots]
        la = plan.a_len[ex][:, None]
        col = np.clip(np.arange(self.seq_len)[None, :] - 1, 0, la - 1)
        doc = np.searchsorted(self.doc_stream, plan.a_start[ex][:, None] + col,
                              side="right") - 1
        return torch.from_numpy(doc - doc[:, :1])

    def _build(self, plan: _Plan, cursor: int, g: torch.Generator) -> dict:
        slots = np.arange(cursor * self.global_batch, (cursor + 1) * self.global_batch)
        ids, types, attention = (torch.from_numpy(a) for a in self._rows(plan, slots))
        documents = self._documents(plan, slots) if self.document_boundaries else None
        mine = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        T = self.seq_len
        batch = {}
        if self.shape.targets == "next-token":
            labels = torch.full_like(ids, IGNORE_INDEX)
            labels[:, :-1] = torch.where(attention[:, 1:] > 0, ids[:, 1:], IGNORE_INDEX)
            if documents is not None:  # a document's end does not predict the next one
                labels[:, :-1][documents[:, 1:] != documents[:, :-1]] = IGNORE_INDEX
            batch["clm_labels"] = labels[mine]
            masked = ids
        else:
            m = self.masking
            special = special_tokens_mask(ids, self.special_ids)
            common = dict(mask_id=self.mask_id, sampling_probs=self.sampling_probs,
                          mlm_prob=mlm_prob_at(m, self.progress), mask_frac=m.mask_frac,
                          random_frac=m.random_frac,
                          max_predictions=m.max_predictions, generator=g)
            span = None
            if self.shape.targets == "spans":
                span = span_mask(ids, special, self.word_starts[ids], span_p=m.span_p,
                                 max_span_words=m.max_span_words, **common)
                masked, labels = span.input_ids, span.labels
            elif m.whole_word:
                masked, labels = whole_word_mask(ids, special, self.word_starts[ids], **common)
            else:
                masked, labels = mask_tokens(ids, special, **common)
            labels = labels[mine]
            flat = torch.nonzero(labels.reshape(-1) != IGNORE_INDEX).squeeze(1)[:self.num_predictions]
            n = len(flat)
            positions = torch.zeros(self.num_predictions, dtype=torch.long)
            positions[:n] = flat
            targets = torch.full((self.num_predictions,), IGNORE_INDEX, dtype=torch.long)
            targets[:n] = labels.reshape(-1)[flat]
            batch["mlm_positions"], batch["mlm_labels"] = positions, targets
            if self.shape.replacement_draws:
                # drawn for the global batch, as the masks are: any number of ranks samples alike
                uniform = draw_uniform(tuple(ids.shape), g)[mine].reshape(-1)
                batch["sample_uniform"] = torch.zeros(self.num_predictions)
                batch["sample_uniform"][:n] = uniform[flat]
            if span is not None:
                row_base = (flat // T) * T
                for name, values in (("span_left", span.span_left[mine]),
                                     ("span_right", span.span_right[mine])):
                    out = torch.zeros(self.num_predictions, dtype=torch.long)
                    out[:n] = row_base + values.reshape(-1)[flat]
                    batch[name] = out
                offset = torch.zeros(self.num_predictions, dtype=torch.long)
                offset[:n] = span.span_offset[mine].reshape(-1)[flat]
                batch["span_offset"] = offset
        if plan.nsp_label is not None:
            batch["nsp_labels"] = torch.from_numpy(plan.nsp_label[plan.order[slots]])[mine]
        attention = attention[mine].contiguous()
        batch.update(input_ids=masked[mine].contiguous(), token_type_ids=types[mine].contiguous(),
                     num_tokens=int(attention.sum()))
        if batch["num_tokens"] < attention.numel():
            # Only batches with padding carry a mask: without one SDPA takes its fastest
            # kernel (FlashAttention on a GPU), and the model need not look at it.
            batch["attention_mask"] = attention
        if documents is not None and bool(documents[mine][:, -1].any()):
            # likewise only batches with a row of several documents carry their ids
            batch["document_ids"] = documents[mine].contiguous()
        return batch

    # Iteration and state --------------------------------------------------------------------
    def set_progress(self, fraction: float) -> None:
        """Called by the training loop before each step (see `progress`)."""
        self.progress = fraction

    def _produce(self, state: dict):
        epoch, cursor = state["epoch"], state["cursor"]
        g = torch.Generator()
        g.set_state(state["generator"])
        while True:
            plan = self._epoch_plan(epoch)
            n = len(plan.order) // self.global_batch
            while cursor < n:
                batch = self._build(plan, cursor, g)
                cursor += 1
                yield batch, {"epoch": epoch, "cursor": cursor, "generator": g.get_state()}
            epoch, cursor = epoch + 1, 0

    def __iter__(self):
        start = dict(self._state)
        if self.prefetch <= 0:
            for batch, state in self._produce(start):
                self._state = state
                yield batch
            return
        # A background thread builds the next batches while the step runs (numpy and torch
        # release the GIL); the state advances only with the batches actually handed out.
        items: queue.Queue = queue.Queue(self.prefetch)
        stop = threading.Event()

        def work() -> None:
            try:
                for item in self._produce(start):
                    if not _hand_over(items, item, stop):
                        return
            except BaseException as e:  # handed to the consumer, raised there
                _hand_over(items, (e, None), stop)

        thread = threading.Thread(target=work, name="bertkit-batches", daemon=True)
        thread.start()
        try:
            while True:
                batch, state = items.get()
                if state is None:
                    raise batch
                self._state = state
                yield batch
        finally:
            stop.set()
            # The thread ends before the iterator does (one batch, milliseconds): a daemon
            # thread still inside a torch call when the interpreter finalizes is ended as it
            # takes the GIL back, through a C++ frame that cannot unwind, and the process
            # aborts (std::terminate, exit -6) instead of exiting with its status. At
            # finalization itself the thread can no longer run, so it is not waited for; nor
            # is one stuck past JOIN_SECONDS (a read from a hung disk): no rank waits forever.
            if not sys.is_finalizing():
                thread.join(JOIN_SECONDS)

    def state_dict(self) -> dict:
        """Position after the last batch handed out: ints and a uint8 tensor only."""
        return {"epoch": self._state["epoch"], "cursor": self._state["cursor"],
                "generator": self._state["generator"].clone(), "seed": self.seed,
                "seq_len": self.seq_len, "global_batch": self.global_batch,
                "objective": self._code}

    def load_state_dict(self, state: dict) -> None:
        for key, mine in (("seed", self.seed), ("seq_len", self.seq_len),
                          ("global_batch", self.global_batch), ("objective", self._code)):
            if int(state[key]) != mine:
                raise UserError(f"the data position was saved with another {key} "
                                f"({int(state[key])}, this run has {mine})")
        self._state = {"epoch": int(state["epoch"]), "cursor": int(state["cursor"]),
                       "generator": torch.as_tensor(state["generator"], dtype=torch.uint8).clone()}


JOIN_SECONDS = 30.0
"""How long a closed batch iterator waits for its thread to finish the batch it is making."""


def _hand_over(items: queue.Queue, item, stop: threading.Event) -> bool:
    """Put `item` in the queue once there is room; False, and nothing put, once `stop` is set
    (the consumer has gone: a full queue would never empty)."""
    while not stop.is_set():
        try:
            items.put(item, timeout=0.1)
            return True
        except queue.Full:
            pass
    return False
