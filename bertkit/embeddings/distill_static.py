"""Static vectors from a sentence encoder, as model2vec distils them (`bertkit static distill`):
no training data, one forward pass per vocabulary entry.

1. Each entry of the teacher's vocabulary (its special tokens and BERT's `[unusedN]` left out)
   goes through the teacher alone, as `[CLS] piece [SEP]`; its vector is the teacher's
   sentence vector of that input, before any normalisation (its own pooling: the mean of the
   three positions for a mean-pooling model such as MiniLM, as model2vec's default).
2. PCA on the centred matrix of those vectors keeps `dims` components (exact SVD,
   `bertkit.embeddings.pca`).
3. Each vector is weighted by its piece's frequency, estimated from its rank r = 1, 2, ... in
   the vocabulary's order (a WordPiece vocabulary lists frequent pieces first), as Zipf's law
   has it, and down-weighted as SIF does (Arora et al. 2017):

       p(r) = (1 / (r + 1)) / sum_k (1 / (k + 1))        w(r) = a / (a + p(r))

   with a = `sif_coefficient` (1e-4): the first pieces ("the", ",") count least.

The special and unused entries keep zero vectors. The directory is model2vec's
(`bertkit.model.static_encoder`): a sentence's vector is the mean of its known pieces' vectors,
normalized, which `Embedder.load(out).encode(texts)`, `model2vec.StaticModel` and
sentence-transformers' `StaticEmbedding` all compute.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.inputs import Encoded
from bertkit.embeddings.pca import pca
from bertkit.files import UserError
from bertkit.model.card import CARD_FILE, card_with_section, read_card, with_front_matter
from bertkit.model.fetch import hub_name
from bertkit.model.static_encoder import save_static
from bertkit.runtime import resolve_device
from bertkit.text.tokenizer import Tokenizer
from bertkit.training.settings import SETTINGS_FILE, run_settings

UNUSED = re.compile(r"\[unused\d+\]")
"""BERT's placeholder pieces, which no text ever produces (model2vec leaves them out too)."""
_MODEL2VEC_POOLING = {"cls": "first", "lasttoken": "last"}
"""bertkit's names of the teacher's pooling, as model2vec's config.json spells them."""


@dataclass(kw_only=True)
class DistillOptions:
    """`bertkit static distill`: which teacher, and how its vectors are reduced."""

    model: Path = field(metadata={"model": True})
    """The teacher: a sentence-transformers or BERT directory (sentence-transformers'
    all-MiniLM-L6-v2, say)."""
    out: Path = field(metadata={"output": "directory"})
    """Output directory, which model2vec and sentence-transformers load as they are."""
    dims: int = 256
    """Dimensions kept by PCA (at most the teacher's width and the pieces distilled)."""
    sif_coefficient: float | None = 1e-4
    """a of the weight a / (a + p) of a piece of estimated frequency p; none: no weighting."""
    normalize: bool = True
    """Sentence vectors are scaled to unit length (config.json's normalize)."""
    batch_size: int = 256
    """Pieces per forward pass of the teacher."""
    device: str = "auto"
    """Where the teacher runs: auto (CUDA when there is one, else the CPU), cpu, cuda, ..."""
    quiet: bool = False
    """No progress on stderr."""

    def __post_init__(self) -> None:
        if self.dims < 1:
            raise UserError(f"--dims must be at least 1, got {self.dims}")
        if self.sif_coefficient is not None and not 0 < self.sif_coefficient < 1:
            raise UserError(f"--sif-coefficient must lie between 0 and 1, got "
                            f"{self.sif_coefficient}")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {self.batch_size}")


@dataclass
class DistillResult:
    path: Path
    pieces: int
    """Vocabulary entries distilled (the rest keep zero vectors)."""
    vocab_size: int
    dims: int
    explained: float
    """Share of the teacher vectors' variance the kept components explain."""


def distilled_ids(tokenizer: Tokenizer) -> np.ndarray:
    """The ids of the vocabulary entries a static model gets a vector for, in id order: all
    but the special tokens (and any other added token) and `[unusedN]`."""
    vocab = tokenizer.get_vocab()
    added = {t.content for t in tokenizer.backend.get_added_tokens_decoder().values()}
    skip = set(tokenizer.special_ids) | {i for t, i in vocab.items()
                                         if t in added or UNUSED.fullmatch(t)}
    return np.array(sorted(i for i in vocab.values() if i not in skip), dtype=np.int64)


def sif_weights(n: int, coefficient: float | None) -> np.ndarray:
    """w(r) = a / (a + p(r)) for ranks r = 1..n, p(r) Zipf's estimate of a piece's
    probability from its rank (the module's docstring); ones without a coefficient."""
    if coefficient is None:
        return np.ones(n)
    inverse = 1.0 / np.arange(2, n + 2, dtype=np.float64)
    return coefficient / (coefficient + inverse / inverse.sum())


def piece_inputs(tokenizer: Tokenizer, ids: np.ndarray) -> list[Encoded]:
    """`[CLS] piece [SEP]` for each id, as the Embedder takes a tokenized text."""
    zeros = np.zeros(3, dtype=np.int64)
    inside = np.array([-1, 0, -1], dtype=np.int64)  # the piece is word 0; the specials none
    return [Encoded(np.array([tokenizer.cls_id, i, tokenizer.sep_id], dtype=np.int64), zeros,
                    np.zeros((3, 2), dtype=np.int64), inside, inside, False) for i in ids]


def teacher_vectors(teacher: Embedder, ids: np.ndarray, batch_size: int,
                    progress: bool) -> np.ndarray:
    """The teacher's sentence vector of each piece alone, unnormalized: [len(ids), width]."""
    return teacher.pool_sentences(piece_inputs(teacher.tokenizer, ids), normalize=False,
                                  batch_size=batch_size, progress=progress)


def check_dims(dims: int, pieces: int, width: int, source: str) -> None:
    """A one-line UserError when PCA cannot keep `dims` components of `pieces` vectors of
    `width` numbers."""
    if dims > width:
        raise UserError(f"--dims {dims}: more than the {width} dimensions of {source}'s "
                        f"vectors")
    if dims > pieces:
        raise UserError(f"--dims {dims}: more than the {pieces} vocabulary entries of "
                        f"{source} to distil (PCA keeps at most one dimension per entry)")


def reduce_and_weigh(vectors: np.ndarray, dims: int,
                     sif_coefficient: float | None) -> tuple[np.ndarray, float]:
    """PCA to `dims`, then each row times its rank's SIF weight; and the share of the
    variance kept."""
    reduced, explained = pca(vectors, dims)
    weighted = reduced * sif_weights(len(vectors), sif_coefficient)[:, None]
    return weighted.astype(np.float32), float(explained.sum())


def _card(teacher_dir: Path, teacher_name: str, result: DistillResult,
          options: DistillOptions) -> str:
    """The teacher's model card with a section on how these vectors were made; its front
    matter names the teacher when it is a Hub model."""
    body = (f"Static vectors distilled from `{teacher_name}` by `bertkit static distill`: "
            f"each of {result.pieces:,} vocabulary entries through the teacher alone, PCA to "
            f"{result.dims} dimensions ({result.explained:.1%} of the variance), "
            + (f"SIF weights by rank (coefficient {options.sif_coefficient})"
               if options.sif_coefficient is not None else "no frequency weights")
            + f". A sentence's vector is the "
            f"mean of its pieces' vectors{', normalized' if options.normalize else ''}; "
            f"`model2vec.StaticModel.from_pretrained` and sentence-transformers load this "
            f"directory as it is.")
    card = card_with_section(read_card(teacher_dir), "Static vectors", body)
    return with_front_matter(card, {"library_name": "model2vec", "pipeline_tag": None,
                                    "base_model": hub_name(teacher_dir)})


def distill_static(options: DistillOptions, command: str | None = None) -> DistillResult:
    """Distil the teacher of `options` into a static model directory at `options.out` (the
    module's docstring says how); `command` is recorded in its training_args.json."""
    device = resolve_device(options.device)
    teacher = Embedder.load(options.model, device=device)
    tokenizer, source = teacher.tokenizer, teacher.source
    ids = distilled_ids(tokenizer)
    check_dims(options.dims, len(ids), teacher.sentence_width(), source)
    if not options.quiet:
        print(f"distilling {len(ids):,} of {tokenizer.vocab_size:,} vocabulary entries of "
              f"{source}", file=sys.stderr)
    vectors = teacher_vectors(teacher, ids, options.batch_size, not options.quiet)
    weighted, explained = reduce_and_weigh(vectors, options.dims, options.sif_coefficient)
    table = np.zeros((tokenizer.vocab_size, options.dims), dtype=np.float32)
    table[ids] = weighted
    name = hub_name(source) or str(options.model)
    result = DistillResult(Path(options.out), len(ids), tokenizer.vocab_size, options.dims,
                           explained)
    config = {"tokenizer_name": name, "apply_pca": options.dims,
              "sif_coefficient": options.sif_coefficient, "seq_length": 1_000_000,
              "normalize": options.normalize,
              "pooling": "+".join(_MODEL2VEC_POOLING.get(m, m) for m in teacher.pool),
              "max_length": None}
    settings = run_settings({"options": options}, device=device, precision="fp32",
                            command=command)
    save_static(options.out, table, tokenizer, config, extra_files={
        SETTINGS_FILE: json.dumps(settings, indent=2, default=str),
        CARD_FILE: _card(Path(source), name, result, options).rstrip("\n")},
        lowercase=teacher.lowercase)
    return result


__all__ = ["DistillOptions", "DistillResult", "distill_static", "distilled_ids", "sif_weights",
           "piece_inputs", "teacher_vectors", "reduce_and_weigh", "check_dims", "UNUSED"]
