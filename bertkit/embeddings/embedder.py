"""Contextual vectors out of an encoder: tokens, words in context, sentences.

BERT gives one vector per token *instance*. This module turns those into what people use:
vectors from any layer or set of layers (the last four combined by mean, sum or
concatenation), one vector per word (mean or first of its subword pieces), one per sentence
(any of sentence-transformers' poolings: [CLS], mean, max, ... over the real tokens,
optionally L2-normalised). Files of any size, streamed to `.npy` with an index of what each row
is: `bertkit.embeddings.files`.

A sentence-transformers directory is read as sentence-transformers reads it (its modules.json:
Pooling, Normalize, max_seq_length; `bertkit.embeddings.sentence_model`), so that by default
`Embedder.load(dir).encode(texts)` equals `SentenceTransformer(dir).encode(texts)`; and
`Embedder.save` writes one. Explicit arguments (pool, normalize, layers) override.

Texts are tokenized into `Encoded` inputs that keep each piece's characters and word, so that
the vectors of pieces can be pooled back into words (`word_groups`, `WordRef`): all in
`bertkit.embeddings.inputs`; the batches run as `bertkit.embeddings.batch_tasks` says.

Speed: texts are sorted by token count and batched with neighbours of (nearly) the same
length, so almost no position is padding; independent batches run on separate cores; the
model runs under `torch.inference_mode`, in bf16 autocast on request.

Layer numbers index the hidden states: 0 is the embedding layer's output, 1..L the blocks,
negative numbers count from the last (-1, the default, is the last block).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np
import torch

from bertkit.embeddings.batch_tasks import (Task, on_device, parallel_map, reduce_groups,
                                            reduce_rows)
from bertkit.embeddings.inputs import (Encoded, Text, WordRef, plan_batches, tokenize_texts,
                                       warn_truncated, word_groups)
from bertkit.embeddings.sentence_model import (POOLING_MODES, read_sentence_model,
                                               sentence_model_files)
from bertkit.embeddings.static_pooling import encoded_means, static_sentences
from bertkit.embeddings.standardize import STANDARDIZER_FILE, Standardizer, unit_rows
from bertkit.files import UserError, read_json
from bertkit.model.elmo import load_elmo
from bertkit.model.encoder import Encoder
from bertkit.model.fetch import resolve_model
from bertkit.model.hub import load_encoder, save_model
from bertkit.model.kind import EMBEDDER_KINDS, ModelKind, model_kind, require_kind
from bertkit.model.static_encoder import load_static_encoder, load_static_tokenizer
from bertkit.progress import Progress
from bertkit.runtime import check_inference_precision, resolve_device, warned_precision
from bertkit.text.tokenizer import Tokenizer, check_fits, check_pairs
from bertkit.text.windows import split, windowed_span

LayerSpec = int | Sequence[int] | str
"""A layer number, a list of them, "last4" or "all"."""

COMBINES = ("mean", "sum", "concat")
POOLS = POOLING_MODES
"""Sentence poolings: [CLS], max, mean, mean * sqrt(count), mean weighted by position, last."""
SUBWORD_POOLS = ("mean", "first")
REDUCTIONS = ("mean", "first", "last", "max", "mean_sqrt_len_tokens", "weightedmean")
"""How the vectors of one group of positions (a word's pieces, a sentence's tokens) become one."""
_POOL_REDUCTION = {"cls": "first", "lasttoken": "last"}


def resolve_layers(spec: LayerSpec, num_layers: int) -> list[int]:
    """Hidden-state indices (0..num_layers) for a layer spec; raises ValueError if out of range."""
    n = num_layers + 1
    if isinstance(spec, str):
        if spec == "last4":  # all of them in a model of fewer (ELMo has 3)
            spec = list(range(-min(4, n), 0))
        elif spec == "all":
            spec = list(range(n))
        else:
            try:
                spec = [int(x) for x in spec.split(",")]
            except ValueError:
                raise ValueError(f"layers {spec!r}: expected a number, a comma-separated list, "
                                 f"'last4' or 'all'") from None
    if isinstance(spec, (int, np.integer)):
        spec = [int(spec)]
    out = []
    for layer in spec:
        if not -n <= layer < n:
            raise ValueError(f"layer {layer} does not exist: the model has layers 0..{n - 1} "
                             f"(0 = embeddings) or -{n}..-1")
        out.append(layer % n)
    if not out:
        raise ValueError("no layers selected")
    return out


class Embedder:
    """A loaded encoder and tokenizer that turn texts into vectors.

    Familiar to sentence-transformers users: `Embedder.load(dir).encode(sentences,
    batch_size=32, normalize=True)`. Loading happens once; every method reuses the model.
    """

    def __init__(self, encoder: Encoder, tokenizer, *, max_length: int | None = None,
                 precision: str = "fp32", standardizer: Standardizer | None = None,
                 workers: int | None = None, max_padding: float = 0.02,
                 pool: str | Sequence[str] = "mean", normalize: bool = False,
                 lowercase: bool = False, known_pieces_only: bool = False,
                 windows: bool = False, source: str = "the model"):
        check_inference_precision(precision)
        self.pool = _pool_modes(pool)
        """Default sentence pooling (a sentence-transformers directory's Pooling); several
        modes give their vectors side by side."""
        self.normalize = normalize
        """Sentence vectors are scaled to unit length by default (a Normalize module)."""
        self.lowercase = lowercase
        """Texts are lowercased before tokenizing (sentence-transformers' do_lower_case)."""
        self.known_pieces_only = known_pieces_only
        """Sentence vectors pool only the text's own known pieces, [CLS], [SEP] and [UNK] left
        out: a static model's rule (model2vec's), where a transformer's pool every position
        (sentence-transformers')."""
        self.windows = windows
        """Inputs longer than `max_length` are read in windows (bertkit.text.windows), not cut."""
        self.encoder = encoder.eval()
        self.tokenizer = tokenizer
        self.config = encoder.config
        check_fits(tokenizer, self.config, source)
        self.max_length = min(max_length or self.config.max_positions, self.config.max_positions)
        self.precision = precision
        if standardizer is not None:
            standardizer.check_width(self.config.hidden_size)
        self.standardizer = standardizer
        self.device = next(encoder.parameters()).device
        self.max_padding = max_padding
        """Largest share of a batch's positions that may be padding (see plan_batches):
        2% costs a few more batches than fixed-size ones and saves the padding's compute."""
        self.source = source
        """The model's name (its directory) in messages."""
        self.workers = max(1, workers or torch.get_num_threads())
        """Batches computed at once on the CPU, each on one thread: independent batches on
        separate cores never wait for each other, where one batch split over all cores meets
        at a barrier after every operation. 1 = one batch at a time on torch's threads."""

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu", precision: str = "fp32",
             max_length: int | None = None, workers: int | None = None,
             revision: str | None = None, windows: bool = False) -> "Embedder":
        """Load a bertkit / Hugging Face BERT directory, or a model's name on the Hugging Face
        Hub (`sentence-transformers/all-MiniLM-L6-v2`, at `revision`, fetched into its cache:
        `bertkit.model.fetch.resolve_model`), an ELMo directory (`bertkit road elmo`) or a
        static model's (`bertkit static distill`, model2vec's layout).

        A sentence-transformers directory (modules.json) sets the default pooling,
        normalisation, maximum length and lowercasing as sentence-transformers does. A static
        model's sentence vector is the mean of the text's known pieces, normalized as its
        config.json says, as model2vec's `encode` computes it. Otherwise the maximum length is
        `sentence_bert_config.json`'s when there is one, else the model's positions, and
        sentence vectors are token means. A fitted standardizer saved in the directory
        (`standardize.safetensors`) is loaded, and applied only when a call asks for
        `standardize=True`; `windows=True` reads longer inputs in windows (`Embedder.windows`).
        """
        path = require_kind(resolve_model(path, revision), *EMBEDDER_KINDS)
        standardizer = None
        if (path / STANDARDIZER_FILE).is_file():
            standardizer = Standardizer.load(path / STANDARDIZER_FILE)
        kind = model_kind(path)
        if kind is ModelKind.STATIC_SENTENCE:
            encoder = load_static_encoder(path, device)
            return cls(encoder, load_static_tokenizer(path), precision=precision,
                       max_length=max_length, standardizer=standardizer, workers=workers,
                       normalize=encoder.config.normalize, known_pieces_only=True,
                       windows=windows, source=str(path))
        sentence = read_sentence_model(path)
        if sentence is not None:
            model_dir = sentence.transformer
            encoder = load_encoder(model_dir, device)
            return cls(encoder, Tokenizer.load(model_dir), precision=precision,
                       max_length=max_length or sentence.max_seq_length,
                       standardizer=standardizer, workers=workers, pool=sentence.pool,
                       normalize=sentence.normalize, lowercase=sentence.lowercase,
                       windows=windows, source=str(path))
        # An ELMo directory: its LSTM layers stand in for BERT's (same hidden_states interface).
        encoder = (load_elmo(path, device) if kind is ModelKind.ELMO
                   else load_encoder(path, device))
        tokenizer = Tokenizer.load(path)
        if max_length is None and (path / "sentence_bert_config.json").is_file():
            try:  # an unreadable setting is left out: the model's own maximum applies
                st = read_json(path / "sentence_bert_config.json")
                max_length = int(st.get("max_seq_length") or 0) or None
            except (UserError, ValueError, TypeError, AttributeError):
                pass
        return cls(encoder, tokenizer, max_length=max_length, precision=precision,
                   standardizer=standardizer, workers=workers, windows=windows,
                   source=str(path))

    def save(self, path: str | Path) -> Path:
        """Write a model directory that is also a sentence-transformers one: the encoder and
        tokenizer as `bertkit.model.hub.save_model` writes them, plus modules.json,
        1_Pooling/config.json, sentence_bert_config.json (this Embedder's maximum length) and,
        when `normalize` is set, 2_Normalize. `SentenceTransformer(path).encode` then gives
        what `encode` gives here. Appears complete or not at all. (A standardizer is not
        saved: sentence-transformers has no place for it.)"""
        files = sentence_model_files(self.pool, self.normalize, self.max_length,
                                     self.config.hidden_size, self.lowercase)
        return save_model(self.encoder, path, tokenizer=self.tokenizer, extra_files=files)

    # Tokenizing -------------------------------------------------------------------------------

    def tokenize(self, texts: Sequence[Text], truncation: bool = True,
                 names: Sequence[str] | None = None) -> list[Encoded]:
        """Tokenize with offsets and word ids; over-long inputs are cut to `max_length`
        (`truncation=True`, flagged `truncated`) or rejected with a UserError naming the input
        (`names[i]`, e.g. "FILE:LINE", else "input i+1"); with `windows`, kept whole."""
        if any(not isinstance(t, str) for t in texts):
            check_pairs(self.config, self.source)
        encoded = tokenize_texts(self.tokenizer, texts, sys.maxsize if self.windows else
                                 self.max_length, truncation, names, self.lowercase)
        for i, e in enumerate(encoded if self.windows else ()):  # a pair's first text fits
            if len(e.ids) > self.max_length:
                split(len(e.ids), windowed_span(e.type_ids), self.max_length,
                      names[i] if names is not None else f"input {i + 1}")
        return encoded

    # The forward pass -------------------------------------------------------------------------

    def _tasks(self, encoded: Sequence[Encoded], groups: Sequence[list[np.ndarray]],
               first_row: np.ndarray, batch_size: int,
               reduce: tuple[str, ...]) -> Iterator["Task"]:
        """Batches of texts of similar token counts, with the positions each output row pools.

        Longest first, so a batch too big for memory fails at once rather than at the end.
        """
        # first or last alone need one position of each group: gather only that one
        only = reduce[0] if len(reduce) == 1 and reduce[0] in ("first", "last") else None
        for items in plan_batches(np.array([len(e.ids) for e in encoded]), batch_size,
                                  self.max_padding):
            lengths = np.array([len(encoded[i].ids) for i in items])
            B, T = len(items), int(lengths.max())
            mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)  # [B, T]
            ids = np.zeros((B, T), dtype=np.int64)
            types = np.zeros((B, T), dtype=np.int64)
            ids[mask.astype(bool)] = np.concatenate([encoded[i].ids for i in items])
            types[mask.astype(bool)] = np.concatenate([encoded[i].type_ids for i in items])
            flat, local, rank, rows = [], [], [], []
            for b, i in enumerate(items):
                for k, positions in enumerate(groups[i]):
                    chosen = positions[:1] if only == "first" else \
                        positions[-1:] if only == "last" else positions
                    flat.append(b * T + chosen)
                    local.append(np.full(len(chosen), len(rows)))
                    rank.append(np.arange(len(chosen)))
                    rows.append(first_row[i] + k)
            if rows:
                yield Task(ids, types, mask, np.concatenate(flat), np.concatenate(local),
                            np.concatenate(rank), np.asarray(rows), B)

    def _states(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray, layers: list[int],
                combine: str, standardize: bool) -> torch.Tensor:
        """[B, T] arrays -> [B, T, H] (or [B, T, k*H] for concat) float32 vectors."""
        dev = self.device
        need_all = layers != [self.config.num_layers]
        autocast = torch.autocast(dev.type, dtype=torch.bfloat16,
                                  enabled=self.precision == "bf16")
        with torch.inference_mode(), autocast:
            out = self.encoder(on_device(ids, dev), on_device(types, dev), on_device(mask, dev),
                               output_hidden_states=need_all)
        states = out.hidden_states if need_all else {layers[0]: out.last_hidden_state}
        picked = [states[i].float() for i in layers]
        if standardize:
            picked = [self.standardizer.transform_layer(x, i) for x, i in zip(picked, layers)]
        if len(picked) == 1:
            return picked[0]
        if combine == "concat":
            return torch.cat(picked, dim=-1)
        total = torch.stack(picked).sum(0)  # [k, B, T, H] -> [B, T, H]
        return total / len(picked) if combine == "mean" else total

    def _vectors(self, task: "Task", layers: list[int], combine: str, standardize: bool,
                 reduce: tuple[str, ...]) -> torch.Tensor:
        """One batch's vectors [R, W * len(reduce)] on the model's device, each reduction of
        the row's positions side by side. Nothing here makes the host wait for a GPU (the
        copies in are queued, as the training loop's are); `_run` then copies them out."""
        h = self._states(task.ids, task.types, task.mask, layers, combine, standardize)
        h = h.reshape(-1, h.shape[-1])  # [B*T, W]
        picked = h.index_select(0, on_device(task.flat, h.device))  # [P, W]
        local, rank = on_device(task.local, h.device), on_device(task.rank, h.device)
        out = [reduce_rows(how, picked, local, rank, len(task.rows)) for how in reduce]
        return out[0] if len(out) == 1 else torch.cat(out, dim=1)

    def _run(self, task: "Task", layers: list[int], combine: str, standardize: bool,
             reduce: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """One batch: its output rows and their vectors, back on the host."""
        return task.rows, self._vectors(task, layers, combine, standardize, reduce).cpu().numpy()

    def pool_groups(self, encoded: Sequence[Encoded], groups: Sequence[list[np.ndarray]],
                    layers: LayerSpec, combine: str, reduce: str | Sequence[str],
                    standardize: bool, batch_size: int, progress: bool, what: str,
                    out: np.ndarray | None = None) -> np.ndarray:
        """The vectors of groups of token positions: `groups[i]` lists, for input i, one array
        of positions per output row (rows numbered in order over i), reduced to one vector by
        `reduce` (one of REDUCTIONS, or several side by side).

        Written into `out` when given (e.g. a slice of a memory-mapped file), so that a large
        result never has to fit in memory."""
        layers = resolve_layers(layers, self.config.num_layers)
        _check_choice("combine", combine, COMBINES)
        reduce = (reduce,) if isinstance(reduce, str) else tuple(reduce)
        for how in reduce:
            _check_choice("reduction", how, REDUCTIONS)
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        if standardize and self.standardizer is None:
            raise UserError("standardization requested but no standardizer is fitted for "
                            "this model (run `bertkit anisotropy --fit-standardizer`)")
        first_row = np.cumsum([0] + [len(g) for g in groups])
        width = self.config.hidden_size * (len(layers) if combine == "concat" else 1) * len(reduce)
        if out is None:
            out = np.zeros((int(first_row[-1]), width), dtype=np.float32)
        elif out.shape != (int(first_row[-1]), width):
            raise ValueError(f"out has shape {out.shape}, expected {(int(first_row[-1]), width)}")
        # Measured in tokens: batches go longest first, so texts/s would start slow and make
        # the first ETA far too long.
        bar = Progress(what, sum(len(e.ids) for e in encoded), "tokens",
                       counts={"texts": len(encoded)}, enabled=progress)
        if self.windows:  # else tokenize cut every input to fit
            encoded, groups, first_row = self._pool_windowed(
                encoded, groups, first_row, layers, combine, reduce, standardize, batch_size,
                out, bar)
        tasks = self._tasks(encoded, groups, first_row, batch_size, reduce)
        for (rows, vectors), n in parallel_map(
                lambda t: (self._run(t, layers, combine, standardize, reduce), t), tasks,
                self.workers if self.device.type == "cpu" else 1):
            out[rows] = vectors
            bar.update(add=int(n.mask.sum()), texts=n.size)
        bar.finish()
        return out

    def _pool_windowed(self, encoded: Sequence[Encoded], groups: Sequence[list[np.ndarray]],
                       first_row: np.ndarray, layers: list[int], combine: str,
                       reduce: tuple[str, ...], standardize: bool, batch_size: int,
                       out: np.ndarray, bar: Progress) -> tuple[list, list, np.ndarray]:
        """`pool_groups` of the inputs longer than `max_length`: each window run as an input,
        a token's vector from its most central (`Windows.assemble`), pooled as ever. Returns
        the (encoded, groups, first_row) of the inputs that fit, left to do."""
        fits = np.array([len(e.ids) <= self.max_length for e in encoded], dtype=bool)
        if fits.all():
            return encoded, groups, first_row
        long = np.flatnonzero(~fits).tolist()
        splits = [split(len(encoded[i].ids), windowed_span(encoded[i].type_ids),
                        self.max_length, f"input {i + 1}") for i in long]
        pieces = [encoded[i].window(held) for i, w in zip(long, splits) for held in w.positions]
        flat = self.pool_groups(pieces, [[np.array([t]) for t in range(len(e.ids))]
                                         for e in pieces], layers, combine, "mean",
                                standardize, batch_size, False, "windows")
        windows, k = np.split(flat, np.cumsum([len(e.ids) for e in pieces])[:-1]), 0
        for i, w in zip(long, splits):
            tokens = w.assemble(windows[k:k + len(w.positions)])
            k += len(w.positions)
            if groups[i]:
                rows = first_row[i] + np.arange(len(groups[i]))
                out[rows] = reduce_groups(torch.from_numpy(tokens), groups[i], reduce).numpy()
            bar.update(add=len(encoded[i].ids), texts=1)
        keep = np.flatnonzero(fits)
        return [encoded[i] for i in keep], [groups[i] for i in keep], first_row[keep]

    # Public API ------------------------------------------------------------------------------

    def embed(self, texts: Sequence[Text], *, layers: LayerSpec = -1, combine: str = "mean",
              pool: str | Sequence[str] | None = None, normalize: bool | None = None,
              standardize: bool = False, batch_size: int = 32, truncation: bool = True,
              progress: bool = False) -> np.ndarray:
        """One float32 vector per text, pooled over its tokens ([CLS] and [SEP] included, as
        sentence-transformers does) of the chosen layers: `pool` is one of POOLS ("cls",
        "mean", "max", ...) or several side by side; None: this Embedder's default (the
        directory's Pooling, else "mean"). `normalize` scales each row to unit length; None:
        the default (a Normalize module). Returns [N, H] (or [N, k*H] for `combine="concat"`
        over k layers, times the number of pooling modes)."""
        if self._static_mean(layers, pool, standardize, texts):
            vectors = static_sentences(self.encoder.embeddings.weight, self.tokenizer, texts,
                                       self.max_length, truncation, self.lowercase)
            return unit_rows(vectors) if (self.normalize if normalize is None else normalize) \
                else vectors
        encoded = self.tokenize(texts, truncation)
        warn_truncated(encoded, self.max_length)
        return self.pool_sentences(encoded, layers=layers, combine=combine, pool=pool,
                                   normalize=normalize, standardize=standardize,
                                   batch_size=batch_size, progress=progress)

    def pool_sentences(self, encoded: Sequence[Encoded], *, layers: LayerSpec = -1,
                       combine: str = "mean", pool: str | Sequence[str] | None = None,
                       normalize: bool | None = None, standardize: bool = False,
                       batch_size: int = 32, progress: bool = False,
                       out: np.ndarray | None = None) -> np.ndarray:
        """`embed` on inputs already tokenized, written into `out` when given."""
        modes = self.pool if pool is None else _pool_modes(pool)
        vectors = encoded_means(self.encoder.embeddings.weight, encoded, self.tokenizer.unk_id,
                                out) if self._static_mean(layers, pool, standardize) else \
            self.pool_groups(encoded, [[self._pooled_positions(e)] for e in encoded], layers,
                             combine, [_POOL_REDUCTION.get(m, m) for m in modes], standardize,
                             batch_size, progress, "sentences", out=out)
        if self.normalize if normalize is None else normalize:
            vectors[:] = unit_rows(vectors)
        return vectors

    def _static_mean(self, layers: LayerSpec, pool: str | Sequence[str] | None,
                     standardize: bool, texts: Sequence[Text] = ()) -> bool:
        """A static model's mean of known pieces, which bertkit.embeddings.static_pooling
        computes at once, without batches (texts: single ones, not pairs)."""
        return (self.known_pieces_only and not standardize and not self.windows
                and all(isinstance(t, str) for t in texts)
                and resolve_layers(layers, self.config.num_layers) == [0]
                and (self.pool if pool is None else _pool_modes(pool)) == ("mean",))

    def _pooled_positions(self, e: Encoded) -> np.ndarray:
        """The positions of one input that its sentence vector pools (`known_pieces_only`)."""
        if not self.known_pieces_only:
            return np.arange(len(e.ids))
        return np.flatnonzero((e.word_ids >= 0) & (e.ids != self.tokenizer.unk_id))

    def sentence_width(self, layers: LayerSpec = -1, combine: str = "mean",
                       pool: str | Sequence[str] | None = None) -> int:
        """The length of the vectors `embed` returns with these settings."""
        modes = self.pool if pool is None else _pool_modes(pool)
        k = len(resolve_layers(layers, self.config.num_layers)) if combine == "concat" else 1
        return self.config.hidden_size * k * len(modes)

    def encode(self, sentences: str | Sequence[Text], batch_size: int = 32,
               normalize: bool | None = None, pool: str | Sequence[str] | None = None,
               show_progress_bar: bool = False,
               normalize_embeddings: bool | None = None) -> np.ndarray:
        """sentence-transformers' `encode`: last layer, the directory's pooling and
        normalisation (mean and none for a plain BERT directory); a single string gives a
        single vector. `normalize_embeddings` is sentence-transformers' name for `normalize`."""
        single = isinstance(sentences, str)
        if normalize_embeddings is not None:
            normalize = normalize_embeddings
        vectors = self.embed([sentences] if single else sentences, pool=pool,
                             normalize=normalize, batch_size=batch_size,
                             progress=show_progress_bar)
        return vectors[0] if single else vectors

    def token_vectors(self, texts: Sequence[Text], *, layers: LayerSpec = -1,
                      combine: str = "mean", standardize: bool = False,
                      batch_size: int = 32) -> list[np.ndarray]:
        """Every token's vector, special tokens included: one [T_i, H] array per text."""
        encoded = self.tokenize(texts)
        warn_truncated(encoded, self.max_length)
        groups = [[np.array([t]) for t in range(len(e.ids))] for e in encoded]
        flat = self.pool_groups(encoded, groups, layers, combine, "mean", standardize,
                                batch_size, False, "texts")
        bounds = np.cumsum([0] + [len(e.ids) for e in encoded])
        return [flat[bounds[i]:bounds[i + 1]] for i in range(len(encoded))]

    def word_vectors(self, texts: Sequence[str], spans: Sequence[tuple[int, int]], *,
                     layers: LayerSpec = "last4", combine: str = "mean",
                     subword_pool: str = "mean", standardize: bool = False,
                     batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """The vector of the word at `text[start:end]` in its context, for many targets.

        Pools the subword pieces overlapping the character span (their mean, or the first
        piece). Returns [N, H] float32, row i for (texts[i], spans[i]). A span that covers no
        piece (only spaces, or cut off by truncation) raises ValueError naming the target.
        """
        if len(texts) != len(spans):
            raise ValueError(f"{len(texts)} texts but {len(spans)} spans")
        _check_choice("subword_pool", subword_pool, SUBWORD_POOLS)
        encoded = self.tokenize(list(texts))
        groups = []
        for i, (e, (start, end)) in enumerate(zip(encoded, spans)):
            if not 0 <= start < end <= len(texts[i]):
                raise ValueError(f"target {i}: span ({start}, {end}) is outside its text of "
                                 f"{len(texts[i])} characters")
            hit = np.flatnonzero((e.segment == 0) & (e.offsets[:, 0] < end)
                                 & (e.offsets[:, 1] > start))
            if hit.size == 0:
                why = " (cut off by truncation)" if e.truncated else ""
                raise ValueError(f"target {i}: span ({start}, {end}) "
                                 f"{texts[i][start:end]!r} covers no token{why}")
            groups.append([hit])
        return self.pool_groups(encoded, groups, layers, combine, subword_pool, standardize,
                                batch_size, progress, "targets")

    def word_vector(self, text: str, char_span: tuple[int, int], **kwargs) -> np.ndarray:
        """The vector [H] of the word at `text[start:end]` in this context (see word_vectors)."""
        return self.word_vectors([text], [char_span], **kwargs)[0]

    def words(self, texts: Sequence[Text], *, layers: LayerSpec = -1, combine: str = "mean",
              subword_pool: str = "mean", standardize: bool = False, batch_size: int = 32,
              truncation: bool = True,
              progress: bool = False) -> tuple[np.ndarray, list[WordRef]]:
        """A vector for every word of every text (special tokens left out), and which word
        each row is."""
        _check_choice("subword_pool", subword_pool, SUBWORD_POOLS)
        encoded = self.tokenize(texts, truncation)
        warn_truncated(encoded, self.max_length)
        groups, refs = word_groups(encoded, texts)
        vectors = self.pool_groups(encoded, groups, layers, combine, subword_pool, standardize,
                                   batch_size, progress, "texts")
        return vectors, refs


# Module-level shortcuts -----------------------------------------------------------------------

@dataclass(kw_only=True)
class EncoderOptions:
    """The model whose vectors are read, and how it runs."""

    model: Path = field(metadata={"model": True})
    """bertkit, Hugging Face or sentence-transformers directory (a name on the Hub: e.g.
    sentence-transformers/all-MiniLM-L6-v2)."""
    device: str = "auto"
    """Where the model runs: auto (CUDA if there is one, else the CPU), cpu, cuda, cuda:1, ..."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """fp32 (exact) or bf16 autocast (about 2x faster on CPUs with AVX512-BF16); auto: bf16 on
    a GPU that runs it natively (Ampere on; a V100 or T4 emulates it), else fp32."""
    max_length: int | None = None
    """Cut inputs to this many tokens; none: the model's (sentence-transformers'
    max_seq_length, else its positions)."""
    workers: int | None = None
    """Batches computed at once, one core each; none: torch's thread count; 1 = one batch at a
    time on all threads."""

    def __post_init__(self) -> None:
        for name in ("max_length", "workers"):  # 0 would read as "none" further on
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got "
                                f"{getattr(self, name)}")

    def runs_on(self) -> tuple[torch.device, str]:
        """(device, precision) resolved, with bf16's warning on stderr where it will crawl."""
        device = resolve_device(self.device)
        return device, warned_precision(self.precision, device)

    def load(self) -> Embedder:
        """The Embedder these settings describe, on its device and precision."""
        device, precision = self.runs_on()
        return Embedder.load(self.model, device=device, precision=precision,
                             max_length=self.max_length, workers=self.workers)


@dataclass(kw_only=True)
class SentencePooling:
    """How a model's token vectors become a sentence vector, where a command overrides the
    model's own (`bertkit sentence-model`)."""

    pool: Literal["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean",
                  "lasttoken"] | None = None
    """Sentence vector from the tokens; none: the model's own Pooling, else mean."""
    normalize: bool | None = None
    """Scale sentence vectors to unit length; none: as the model does (no for plain BERT)."""

    def apply(self, embedder: Embedder) -> Embedder:
        """`embedder` with the pooling and normalizing given (the others left as they are)."""
        if self.pool is not None:
            embedder.pool = (self.pool,)
        if self.normalize is not None:
            embedder.normalize = self.normalize
        return embedder


def _embedder(model: "Embedder | str | Path") -> Embedder:
    return model if isinstance(model, Embedder) else Embedder.load(model)


def embed(model: "Embedder | str | Path", texts: Sequence[Text], **kwargs) -> np.ndarray:
    """`Embedder.embed` on a loaded Embedder or a model directory."""
    return _embedder(model).embed(texts, **kwargs)


def word_vectors(model: "Embedder | str | Path", texts: Sequence[str],
                 spans: Sequence[tuple[int, int]], **kwargs) -> np.ndarray:
    """`Embedder.word_vectors` on a loaded Embedder or a model directory."""
    return _embedder(model).word_vectors(texts, spans, **kwargs)


def word_vector(model: "Embedder | str | Path", text: str, char_span: tuple[int, int],
                **kwargs) -> np.ndarray:
    """`Embedder.word_vector` on a loaded Embedder or a model directory."""
    return _embedder(model).word_vector(text, char_span, **kwargs)


# Helpers ----------------------------------------------------------------------------------------

def _pool_modes(pool: str | Sequence[str]) -> tuple[str, ...]:
    modes = (pool,) if isinstance(pool, str) else tuple(pool)
    if not modes:
        raise ValueError("pool: no pooling mode given")
    for mode in modes:
        _check_choice("pool", mode, POOLS)
    return modes


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} {value!r} is not one of {', '.join(choices)}")


__all__ = ["Embedder", "embed", "word_vector", "word_vectors", "resolve_layers", "COMBINES",
           "POOLS", "SUBWORD_POOLS", "REDUCTIONS"]
