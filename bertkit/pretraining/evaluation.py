"""Judging a pretrained masked LM as the field does: held-out masked-token accuracy, loss and
perplexity; pseudo-log-likelihood and pseudo-perplexity; minimal pairs.

    scores = masked_token_scores(model, tokenizer, texts, mask_rate=0.15, seed=0)
    pll = pseudo_log_likelihood(model, tokenizer, ["the dogs run .", "the dogs runs ."])
    report = minimal_pairs(model, tokenizer, read_pairs("pairs.jsonl"))

Masked-token scores mask a fixed, seeded sample of the non-special pieces, all with [MASK]
by default, and predict them. `mask_frac=0.8, random_frac=0.1` corrupts the sample as
transformers' run_mlm.py evaluates (its collator's 80/10/10: a tenth of the sample replaced by
pieces drawn uniformly from the vocabulary, a tenth left as it is, all of it scored), so that
a figure can be set beside that script's eval_accuracy. On a prepared data directory,
`heldout_scores` is `held_out.held_out_figures` over the held-out split, with the batches
pretraining evaluates on, so the figures equal what `bertkit pretrain` logs for the same
settings.

The pseudo-log-likelihood of a sentence (Salazar et al. 2020, "Masked Language Model Scoring")
is the sum over its non-special pieces of log P(piece | the sentence with that piece masked):
one masked copy per piece. `metric="word-l2r"` is Kauf & Ivanova's 2023 PLL-word-l2r ("A
Better Way to Do Masked Language Model Scoring"): each copy also masks the later pieces of the
piece's word, so that a word of several pieces is not scored as if each piece were all but
given away by its neighbours (minicons' "within_word_l2r"); for words of one piece the two
are equal. All copies of all sentences are sorted by length and packed into
padded batches; the vocabulary projection runs only at the masked row of each copy
(`positions=`), not at every position. A minimal pair counts 1 when the good sentence scores
higher, 1/2 on a tie, 0 otherwise (BLiMP's format: JSON lines with "sentence_good",
"sentence_bad" and grouping fields such as "UID").

Every function takes the model as `bertkit.model.hub.load_pretraining_model` returns it and
uses only `model(input_ids, token_type_ids, attention_mask, positions=...)`; the model is put
in eval mode for the call and given back in the mode it was in.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.files import UserError, format_suffix, read_jsonl, read_lines
from bertkit.model.generate import log_likelihoods, next_token_scores
from bertkit.model.heads import ElectraModel
from bertkit.model.hub import has_detector, load_electra, load_pretraining_model, resolve_model
from bertkit.pretraining.corpus import check_tokenizer, load_manifest, word_starts
from bertkit.pretraining.examples import ROW_ENDS, PretrainingBatches
from bertkit.pretraining.masking import MaskingConfig
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.held_out import held_out_figures
from bertkit.pretraining.objectives import OBJECTIVES, objective_named
from bertkit.progress import Progress
from bertkit.text.sources import is_dataset_dir, numbered_texts
from bertkit.text.tokenizer import Tokenizer, cut_warning

GOOD, BAD = "sentence_good", "sentence_bad"
PLL_METRICS = ("original", "word-l2r")
DEFAULT_GROUP = "UID"
"""The grouping field of BLiMP lines, used when the pairs carry it and no other is asked for."""
FILE_GROUP = "file"
"""The field `read_pairs` gives the pairs of a directory (their file's name): the grouping
where they carry no UID."""


@dataclass
class LMEvalOptions:
    """How `bertkit evaluate` judges a pretrained (not fine-tuned) model."""

    max_lines: int | None = None
    """Text file: score at most this many non-blank lines; none: all."""
    text_field: str = "text"
    """JSON lines (not minimal pairs), CSV, TSV, Parquet, Arrow or a `datasets` directory
    given as the text to score: the field (column) of each record that holds it."""
    mask_rate: float = 0.15
    """Share of the pieces masked for masked-token accuracy: of each line of a text file (at
    least one), or of the held-out rows of a prepared directory (pretraining logs its own
    --mlm-prob: give the same rate to reproduce its figures)."""
    seed: int = 0
    """Text file: seed of the masked sample; prepared directory: pretraining's --seed (the
    held-out masks are drawn as pretraining draws them)."""
    mask_frac: float | None = None
    """Share of the masked sample put to [MASK]; none: all of it for a text file, pretraining's
    --mask-frac (0.8) for a prepared directory. 0.8 with --random-frac 0.1 is how transformers'
    run_mlm.py corrupts and scores held-out text (its eval_accuracy)."""
    random_frac: float | None = None
    """Share of the masked sample replaced by a random piece (uniform over the vocabulary for
    a text file, the corpus's unigram distribution for a prepared directory, as pretraining
    draws them); the rest of the sample is left as it is but still scored; none: 0 for a text
    file, pretraining's --random-frac (0.1) for a prepared directory."""
    group_by: str | None = None
    """Minimal pairs: field whose values group the pairs; none: "UID" when the pairs have it,
    else "file" for a directory of pair files; "": no groups."""
    pll: str = field(default="original", metadata={"choices": PLL_METRICS})
    """Pseudo-log-likelihood of minimal pairs and pseudo-perplexity: "original" (Salazar et
    al. 2020: each piece masked alone) or "word-l2r" (Kauf & Ivanova 2023: the later pieces
    of its word masked too)."""
    objective: str = field(default="mlm", metadata={"choices": OBJECTIVES})
    """Prepared directory: the objective pretraining ran with (an ELECTRA directory is judged
    as electra whatever this says)."""
    whole_word: bool = False
    """Mask whole words. Prepared directory: as pretraining's --whole-word. Text file: the
    sample is --mask-rate of each line's words, and word_accuracy counts a word right when
    all its pieces are (the accuracy that compares two vocabularies)."""
    seq_len: int = 128
    """Prepared directory: pretraining's --seq-len."""
    row_ends: str = field(default="sentence", metadata={"choices": ROW_ENDS})
    """Prepared directory: pretraining's --row-ends."""
    pretrain_batch_size: int = 16
    """Prepared directory: pretraining's --batch-size (the held-out batches depend on it)."""
    eval_batches: int = 40
    """Prepared directory: held-out batches to score (pretraining's --eval-batches)."""

    def __post_init__(self) -> None:
        if not 0 < self.mask_rate <= 1:
            raise UserError(f"--mask-rate must be in (0, 1], got {self.mask_rate}")
        for name in ("mask_frac", "random_frac"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise UserError(f"--{name.replace('_', '-')} must be in [0, 1], got {value}")
        if self.max_lines is not None and self.max_lines < 1:
            raise UserError(f"--max-lines must be at least 1, got {self.max_lines}")
        if self.pll not in PLL_METRICS:
            raise UserError(f"unknown --pll {self.pll!r}; choose one of {', '.join(PLL_METRICS)}")
        if self.objective not in OBJECTIVES:
            raise UserError(f"unknown objective {self.objective!r}; choose one of "
                            f"{', '.join(OBJECTIVES)}")
        if self.seq_len < 8 or self.pretrain_batch_size < 1 or self.eval_batches < 1:
            raise UserError("--seq-len must be at least 8, --pretrain-batch-size and "
                            "--eval-batches at least 1")


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def _max_length(model: nn.Module, tokenizer) -> int:
    """The longest input: the model's positions (every model judged here has its config)."""
    return int(model.config.max_positions)


def _encode(tokenizer, texts: Sequence[str], max_length: int, truncate: bool,
            names: Sequence[str] | None = None):
    """(flat ids [P], lengths [S], is-special [P]) of the texts with [CLS] / [SEP]."""
    batch = tokenizer.encode_batch(list(texts), max_length=max_length,
                                   truncation="longest_first" if truncate else False,
                                   with_offsets=False, names=names)
    cut_warning(int(batch.cut.sum()), len(batch), max_length, stacklevel=3)
    flat, lengths = batch.flat_ids()
    special = np.isin(flat, np.fromiter(tokenizer.special_ids, dtype=np.int64))
    return flat, lengths, special


def _padded(flat: np.ndarray, lengths: np.ndarray, pad_id: int) -> np.ndarray:
    """int64 [S, longest]: the texts' ids, padded."""
    real = np.arange(int(lengths.max(initial=1)))[None, :] < lengths[:, None]
    ids = np.full(real.shape, pad_id, dtype=np.int64)
    ids[real] = flat
    return ids


def _masked_logits(model: nn.Module, rows: np.ndarray, lengths: np.ndarray,
                   positions: np.ndarray, mask_id: int, device: torch.device,
                   also_masked: np.ndarray | None = None, inputs: np.ndarray | None = None):
    """rows [C, T] of ids (lengths [C] real tokens), positions [N] flat indices into C*T:
    (log-probabilities over the vocabulary [N, V] at those positions, their original ids [N]),
    with [MASK] put at every position (or the ids `inputs` [N] there) and at the flat indices
    `also_masked`, which are not predicted."""
    ids = torch.from_numpy(rows).to(device)
    attention = (torch.arange(rows.shape[1])[None, :] < torch.from_numpy(lengths)[:, None])
    pos = torch.from_numpy(positions).to(device)
    targets = ids.flatten()[pos]
    if inputs is None:
        ids = ids.flatten().index_fill(0, pos, mask_id)
    else:
        ids = ids.flatten().index_copy(0, pos, torch.from_numpy(inputs).to(device))
    if also_masked is not None and len(also_masked):
        ids = ids.index_fill(0, torch.from_numpy(also_masked).to(device), mask_id)
    ids = ids.view(rows.shape)
    logits = model(ids, torch.zeros_like(ids), attention.long().to(device), positions=pos)[0]
    return F.log_softmax(logits.float(), dim=-1), targets


# Masked-token accuracy, loss and perplexity --------------------------------------------------

def _word_begins(tokenizer, flat: np.ndarray, special: np.ndarray) -> np.ndarray:
    """bool [P]: the non-special piece begins a word (`word_starts`, or it follows a special
    token); a word is such a piece and the pieces after it."""
    return (word_starts(tokenizer)[flat] | np.roll(special, 1)) & ~special


def _corruption(mask_frac: float | None, random_frac: float | None, default_mask: float,
                default_random: float) -> tuple[float, float]:
    """(mask_frac, random_frac) with the input's defaults where None; a split past 1 is the
    user's error."""
    mask = default_mask if mask_frac is None else mask_frac
    random = default_random if random_frac is None else random_frac
    if mask + random > 1 + 1e-9:
        raise UserError(f"--mask-frac {mask} and --random-frac {random} add up to more than 1 "
                        f"(where one is not given, it is {default_mask} and {default_random} "
                        f"for this input)")
    return mask, random


def masked_token_scores(model: nn.Module, tokenizer, texts: Sequence[str],
                        mask_rate: float = 0.15, seed: int = 0, batch_size: int = 64,
                        device: str | torch.device = "cpu", mask_frac: float | None = None,
                        random_frac: float | None = None,
                        whole_word: bool = False) -> dict[str, float]:
    """accuracy, loss (mean cross-entropy, nats), perplexity (exp loss) and tokens over a fixed
    sample of masked pieces of `texts` (strings): of each text, round(mask_rate * pieces) (at
    least one) of its non-special pieces, drawn from a generator seeded with `seed`, replaced
    by [MASK] (a share mask_frac of them, default all), by a piece drawn uniformly from the
    vocabulary (random_frac, default none) or left as they are (the rest), and all of them
    predicted. Texts longer than the model's positions are cut to fit. The sample depends on
    the texts and the seed only, not on batch_size (texts per forward pass) or the device.

    whole_word: the sample is round(mask_rate * words) of each text's words (at least one),
    every piece of a chosen word masked, and word_accuracy and masked_words are added: a word
    is right when all its pieces are. Words are the tokenizer's (`word_starts`), drawn by a key
    per word, so two vocabularies that split text into the same words (WordPiece of any size)
    mask the same words of the same texts: word_accuracy compares them, where accuracy per
    piece does not (a smaller vocabulary cuts more words, and a word's second piece is easier
    to guess than a whole word).

    A directory written by `bertkit prepare` is scored by `heldout_scores`, with pretraining's
    batches.
    """
    if isinstance(texts, (str, os.PathLike)):
        raise TypeError("masked_token_scores takes a sequence of texts; score a prepared data "
                        "directory with heldout_scores")
    mask_frac = 1.0 if mask_frac is None else mask_frac
    random_frac = random_frac or 0.0
    if not 0 < mask_rate <= 1:
        raise ValueError(f"mask_rate must be in (0, 1], got {mask_rate}")
    if not (0 <= mask_frac <= 1 and 0 <= random_frac <= 1 and mask_frac + random_frac <= 1 + 1e-9):
        raise ValueError(f"mask_frac {mask_frac} and random_frac {random_frac} must be in "
                         f"[0, 1] and add up to at most 1")
    texts = list(texts)
    flat, lengths, special = _encode(tokenizer, texts, _max_length(model, tokenizer),
                                     truncate=True)
    sample = _MaskedSample.draw(tokenizer, flat, lengths, special, mask_rate, seed, whole_word)
    inputs = None
    if mask_frac < 1:
        # What each chosen piece becomes, drawn after the sample so that the sample itself
        # is the same whatever the split.
        generator = torch.Generator().manual_seed(seed + 1)
        u = torch.rand(len(flat), generator=generator, dtype=torch.float64).numpy()
        random_ids = torch.randint(tokenizer.vocab_size, (len(flat),), generator=generator,
                                   dtype=torch.int64).numpy()
        inputs = np.where(u < mask_frac, tokenizer.mask_id,
                          np.where(u < mask_frac + random_frac, random_ids, flat))
    loss_sum, correct, count = _score_sample(model, tokenizer, flat, lengths, sample, inputs,
                                             batch_size, torch.device(device))
    if count == 0:
        raise UserError("no pieces to score: the texts are empty")
    loss = loss_sum / count
    scores = {"accuracy": correct / count, "loss": loss, "perplexity": math.exp(loss),
              "tokens": count}
    if whole_word:
        words = int(sample.chosen_word.sum())
        scores |= {"word_accuracy": int((sample.wrong[sample.chosen_word] == 0).sum()) / words,
                   "masked_words": words}
    return scores


@dataclass
class _MaskedSample:
    """The pieces `masked_token_scores` predicts, of texts encoded back to back; with whole
    words, the word of each piece and the count of wrong pieces per word (filled in by
    scoring)."""
    chosen: np.ndarray
    """bool [P]: the piece is predicted."""
    word_of: np.ndarray | None = None
    """int [P]: the index of the piece's word (whole words only)."""
    chosen_word: np.ndarray | None = None
    """bool [W]: the word is masked (whole words only)."""
    wrong: np.ndarray | None = None
    """int [W]: pieces of the word predicted wrong (whole words only)."""

    @classmethod
    def draw(cls, tokenizer, flat: np.ndarray, lengths: np.ndarray, special: np.ndarray,
             mask_rate: float, seed: int, whole_word: bool) -> _MaskedSample:
        text_of = np.repeat(np.arange(len(lengths)), lengths)
        if not whole_word:
            return cls(_sample(np.where(special, -1, text_of), len(lengths), mask_rate, seed))
        begins = _word_begins(tokenizer, flat, special)
        word_of = np.cumsum(begins) - 1
        chosen_word = _sample(text_of[begins], len(lengths), mask_rate, seed)
        return cls(~special & chosen_word[np.maximum(word_of, 0)], word_of, chosen_word,
                   np.zeros(len(chosen_word), dtype=np.int64))


def _score_sample(model: nn.Module, tokenizer, flat: np.ndarray, lengths: np.ndarray,
                  sample: _MaskedSample, inputs: np.ndarray | None, batch_size: int,
                  device: torch.device) -> tuple[float, int, int]:
    """(summed loss, right, predicted) over the sample, `batch_size` texts per forward pass
    in order of length; `inputs` [P]: what each piece becomes (None: [MASK])."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    padded = _padded(flat, lengths, tokenizer.pad_id)
    corrupted = None if inputs is None else _padded(inputs, lengths, tokenizer.pad_id)
    flat_at = _padded(np.arange(len(flat)), lengths, -1) if sample.wrong is not None else None
    loss_sum, correct, count = 0.0, 0, 0
    by_length = np.argsort(lengths, kind="stable")
    with _eval_mode(model):
        for start in range(0, len(lengths), batch_size):
            chunk = by_length[start:start + batch_size]
            T = int(lengths[chunk].max())
            within = np.zeros((len(chunk), T), dtype=bool)
            for r, s in enumerate(chunk):
                within[r, :lengths[s]] = sample.chosen[starts[s]:starts[s] + lengths[s]]
            positions = np.flatnonzero(within)
            if len(positions) == 0:
                continue
            put_in = None if corrupted is None else corrupted[chunk, :T].ravel()[positions]
            logp, targets = _masked_logits(model, padded[chunk, :T], lengths[chunk], positions,
                                           tokenizer.mask_id, device, inputs=put_in)
            loss_sum -= float(logp.gather(1, targets[:, None]).sum())
            right = (logp.argmax(-1) == targets).cpu().numpy()
            correct += int(right.sum())
            count += len(positions)
            if flat_at is not None:
                missed = flat_at[chunk, :T].ravel()[positions][~right]
                np.add.at(sample.wrong, sample.word_of[missed], 1)
    return loss_sum, correct, count


def _sample(text_of: np.ndarray, texts: int, mask_rate: float, seed: int) -> np.ndarray:
    """bool [N]: round(mask_rate * n) (at least one) of the n items of each text, by a random
    key per item from a generator seeded with `seed`; items of text -1 are never chosen.
    `text_of` [N] is non-decreasing but for the -1s."""
    key = torch.rand(len(text_of), generator=torch.Generator().manual_seed(seed),
                     dtype=torch.float64).numpy()
    key[text_of < 0] = 2.0
    owner = np.maximum.accumulate(np.maximum(text_of, 0))
    order = np.lexsort((key, owner))
    first = np.searchsorted(owner, np.arange(texts))
    rank = np.empty(len(text_of), dtype=np.int64)
    rank[order] = np.arange(len(text_of)) - first[owner[order]]
    items = np.bincount(text_of[text_of >= 0], minlength=texts)
    k = np.where(items > 0, np.maximum(1, np.round(items * mask_rate)), 0).astype(np.int64)
    return (rank < k[owner]) & (text_of >= 0)


MIN_SCORED_TOKENS = 100
"""Fewer masked tokens than this and held-out figures are noise (an accuracy's standard error
is then over 5 points): `heldout_scores` says so."""


def heldout_batches(data_dir: str | os.PathLike, *, objective: str | Objective = "mlm", seq_len: int = 128,
                    batch_size: int = 16, eval_batches: int = 40, seed: int = 0,
                    whole_word: bool = False, mask_rate: float = 0.15,
                    row_ends: str = "sentence", mask_frac: float | None = None,
                    random_frac: float | None = None) -> list[dict]:
    """The held-out batches `bertkit pretrain` evaluates on for these settings (its --seed is
    `seed`; pretraining draws the held-out masks from seed + 1). mask_frac, random_frac: the
    80/10/10 split, pretraining's defaults where None."""
    default = MaskingConfig()
    mask_frac, random_frac = _corruption(mask_frac, random_frac, default.mask_frac,
                                         default.random_frac)
    held = PretrainingBatches(data_dir, objective=objective, seq_len=seq_len,
                              batch_size=batch_size, split="heldout", seed=seed + 1, prefetch=0,
                              masking=MaskingConfig(mlm_prob=mask_rate, whole_word=whole_word,
                                                    mask_frac=mask_frac, random_frac=random_frac),
                              row_ends=row_ends)
    batches = []
    for batch in held:
        batches.append(batch)
        if len(batches) == eval_batches:
            return batches
    return batches


def heldout_scores(model: nn.Module, data_dir: str | os.PathLike, *,
                   objective: str | Objective = "mlm",
                   seq_len: int = 128, batch_size: int = 16, eval_batches: int = 40,
                   seed: int = 0, whole_word: bool = False, mask_rate: float = 0.15,
                   row_ends: str = "sentence", mask_frac: float | None = None,
                   random_frac: float | None = None,
                   device: str | torch.device = "cpu") -> dict[str, float]:
    """`held_out.held_out_figures` over `heldout_batches`: accuracy, loss, perplexity, tokens
    (and nsp_accuracy for mlm+nsp, sbo_loss for span when the model has the span head)."""
    objective = objective_named(objective)
    objective.check_model(model)
    batches = heldout_batches(data_dir, objective=objective, seq_len=seq_len,
                              batch_size=batch_size, eval_batches=eval_batches, seed=seed,
                              whole_word=whole_word, mask_rate=mask_rate, row_ends=row_ends,
                              mask_frac=mask_frac, random_frac=random_frac)
    device = torch.device(device)
    was_training = model.training
    model.eval()
    try:
        figures = held_out_figures(model, batches, objective, device)
    finally:
        model.train(was_training)
    # An accuracy of 0 out of nothing, or of a handful, must not pass for a figure.
    if figures["eval_tokens"] == 0:
        raise UserError(f"{data_dir}: the held-out split gives no masked tokens to score; "
                        f"prepare it with more text or a larger --heldout")
    if figures["eval_tokens"] < MIN_SCORED_TOKENS:
        print(f"warning: {data_dir}: only {int(figures['eval_tokens'])} masked tokens of the "
              f"held-out split scored: these figures are noise (prepare it with more text or a "
              f"larger --heldout)", file=sys.stderr)
    # the names pretraining logs, without the split's prefix (README, "Metric names")
    return {k.removeprefix("eval_"): v for k, v in figures.items()}


# Pseudo-log-likelihood ------------------------------------------------------------------------

def _pll(model: nn.Module, tokenizer, sentences: Sequence[str], batch_size: int,
         device: torch.device, truncate: bool = False,
         names: Sequence[str] | None = None, metric: str = "original",
         progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pseudo-log-likelihood float64 [S], scored pieces int64 [S], scored words int64 [S])
    of distinct sentences (words by `_word_begins`: a sentence cut to fit counts only the
    words it kept). `progress`: the masked copies scored, their rate and the ETA on stderr
    (a forward pass a piece: minutes for a few thousand lines on a CPU)."""
    if metric not in PLL_METRICS:
        raise ValueError(f"unknown PLL metric {metric!r}; choose one of {PLL_METRICS}")
    flat, lengths, special = _encode(tokenizer, sentences, _max_length(model, tokenizer),
                                     truncate, names)
    text_of = np.repeat(np.arange(len(sentences)), lengths)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    # One masked copy per non-special piece: (its sentence, its position in the sentence),
    # ordered by the sentence's length so that a batch pads little.
    piece = np.flatnonzero(~special)
    copy_sentence = text_of[piece]
    copy_position = piece - starts[copy_sentence]
    # word-l2r: the pieces after a copy's piece up to the next word start (a special token
    # starts a word too, so a word never runs past its sentence's [SEP]) are masked with it.
    if metric == "word-l2r":
        begins = np.flatnonzero(word_starts(tokenizer)[flat] | special)
        ends = np.append(begins, len(flat))[np.searchsorted(begins, piece, side="right")]
        copy_later = ends - piece - 1
    else:
        copy_later = np.zeros(len(piece), dtype=np.int64)
    order = np.argsort(lengths[copy_sentence], kind="stable")
    copy_sentence, copy_position = copy_sentence[order], copy_position[order]
    copy_later = copy_later[order]
    padded = _padded(flat, lengths, tokenizer.pad_id)
    scores = np.zeros(len(sentences), dtype=np.float64)
    bar = Progress("pseudo-log-likelihood", len(order), "masked copies", enabled=progress)
    with _eval_mode(model):
        for start in range(0, len(order), batch_size):
            s = copy_sentence[start:start + batch_size]
            T = int(lengths[s].max())
            positions = np.arange(len(s)) * T + copy_position[start:start + batch_size]
            later = copy_later[start:start + batch_size]
            # flat indices positions[i] + 1 ... positions[i] + later[i], for every copy i
            also = (np.repeat(positions, later) + 1
                    + np.arange(int(later.sum())) - np.repeat(np.cumsum(later) - later, later))
            logp, targets = _masked_logits(model, padded[s, :T], lengths[s], positions,
                                           tokenizer.mask_id, device, also)
            np.add.at(scores, s, logp.gather(1, targets[:, None]).squeeze(1).double().cpu()
                      .numpy())
            bar.update(add=len(s))
    bar.finish()
    words = text_of[_word_begins(tokenizer, flat, special)]
    return (scores, np.bincount(copy_sentence, minlength=len(sentences)),
            np.bincount(words, minlength=len(sentences)))


def _distinct_pll(model, tokenizer, sentences: Sequence[str], batch_size: int, device,
                  truncate: bool = False, metric: str = "original",
                  progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_pll` of each sentence, each distinct sentence scored once: equal sentences get equal
    scores exactly, whatever batch they would have fallen into."""
    distinct = list(dict.fromkeys(sentences))
    index = {s: i for i, s in enumerate(distinct)}
    where = np.fromiter((index[s] for s in sentences), dtype=np.int64, count=len(sentences))
    scores, pieces, words = _pll(model, tokenizer, distinct, batch_size, torch.device(device),
                                 truncate, names=[f"sentence {s[:60]!r}" for s in distinct],
                                 metric=metric, progress=progress)
    return scores[where], pieces[where], words[where]


def pseudo_log_likelihood(model: nn.Module, tokenizer, sentences: Sequence[str],
                          batch_size: int = 256, device: str | torch.device = "cpu",
                          metric: str = "original", progress: bool = False) -> list[float]:
    """One float per sentence: the sum over its non-special pieces of log P(piece | the
    sentence with that piece masked), natural log; metric "word-l2r": with the later pieces
    of the piece's word masked too. batch_size: masked copies per forward pass; progress:
    how many are scored, on stderr. A sentence longer than the model's positions is a
    UserError naming it."""
    return _distinct_pll(model, tokenizer, list(sentences), batch_size, device,
                         metric=metric, progress=progress)[0].tolist()


def pseudo_perplexity(model: nn.Module, tokenizer, texts: Sequence[str], batch_size: int = 256,
                      device: str | torch.device = "cpu", truncate: bool = True,
                      metric: str = "original", progress: bool = False) -> dict[str, float]:
    """pseudo_perplexity = exp(-sum PLL / pieces) over all texts, with pseudo_log_likelihood
    (the sum), pieces and texts, the PLL by `metric` (see `pseudo_log_likelihood`). Texts
    longer than the model's positions are cut to fit (`truncate`) or refused.

    pseudo_perplexity_per_word = exp(-sum PLL / words), words as the tokenizer splits the text
    before it cuts pieces (WordPiece: at spaces and punctuation). Two vocabularies of one kind
    cut the same text into the same words but into different numbers of pieces, so this, not
    the per-piece figure, compares them; with metric "word-l2r", since the "original" PLL
    gives a word more help from its own neighbouring pieces the more pieces it is cut into."""
    scores, pieces, words = _distinct_pll(model, tokenizer, list(texts), batch_size, device,
                                          truncate, metric, progress)
    total, n, w = float(scores.sum()), int(pieces.sum()), int(words.sum())
    if n == 0:
        raise UserError("no pieces to score: the texts are empty")
    return {"pseudo_perplexity": math.exp(-total / n), "pseudo_log_likelihood": total,
            "pieces": n, "texts": len(scores), "words": w,
            "pseudo_perplexity_per_word": math.exp(-total / w)}


# Minimal pairs --------------------------------------------------------------------------------

def _check_pair(pair, where: str) -> None:
    if not isinstance(pair, Mapping):
        raise UserError(f"{where}: expected a JSON object with {GOOD!r} and {BAD!r}")
    for key in (GOOD, BAD):
        if key not in pair:
            raise UserError(f"{where}: no {key!r}")
        if not isinstance(pair[key], str):
            raise UserError(f"{where}: {key!r} is {type(pair[key]).__name__}, not a string")
        if not pair[key].strip():
            raise UserError(f"{where}: {key!r} is empty")


def read_pairs(path: str | os.PathLike) -> list[dict]:
    """The minimal pairs of a JSON-lines file, one object a line with the strings
    "sentence_good" and "sentence_bad" (other fields kept, for grouping), or of every .jsonl
    file of a directory, by name (BLiMP's layout: a file per paradigm), each pair given the
    field "file", its file's name without .jsonl, where it has none. Blank lines are
    skipped; anything else wrong is a UserError naming the file and line."""
    p = Path(path)
    if not p.is_dir():
        return _read_pair_file(p)
    files = _jsonl_files(p)
    if not files:
        raise UserError(f"{p}: no .jsonl files of minimal pairs in this directory")
    return [{**pair, FILE_GROUP: pair.get(FILE_GROUP, f.stem)}
            for f in files for pair in _read_pair_file(f)]


def _read_pair_file(path: Path) -> list[dict]:
    pairs = []
    for number, obj in read_jsonl(path, "minimal-pairs file"):
        _check_pair(obj, f"{path}:{number}")
        pairs.append(obj)
    if not pairs:
        raise UserError(f"{path}: no minimal pairs (an empty file)")
    return pairs


def _jsonl_files(directory: Path) -> list[Path]:
    return sorted(f for f in directory.iterdir() if format_suffix(f) == ".jsonl" and f.is_file())


def is_pairs_file(path: str | os.PathLike) -> bool:
    """A .jsonl file whose first record has a "sentence_good" or "sentence_bad" field, or a
    directory that is no `bertkit prepare` output (no manifest.json) whose first .jsonl file
    is one."""
    p = Path(path)
    if p.is_dir():
        files = [] if (p / "manifest.json").exists() else _jsonl_files(p)
        return bool(files) and is_pairs_file(files[0])
    if format_suffix(p) != ".jsonl" or not p.is_file():
        return False
    for _, line in read_lines(p):
        if line.strip():
            return f'"{GOOD}"' in line or f'"{BAD}"' in line
    return False


def _pair_figures(good: np.ndarray, bad: np.ndarray) -> dict[str, float]:
    wins = (good > bad) + 0.5 * (good == bad)
    return {"accuracy": float(wins.mean()), "pairs": len(good),
            "mean_pll_difference": float((good - bad).mean())}


def minimal_pairs(model: nn.Module, tokenizer, pairs: Sequence[Mapping],
                  group_by: str | None = None, batch_size: int = 256,
                  device: str | torch.device = "cpu", metric: str = "original",
                  progress: bool = False) -> dict:
    """How often the model's pseudo-log-likelihood (by `metric`, see `pseudo_log_likelihood`)
    prefers the good sentence of each pair (a left-to-right model, config.json "is_decoder":
    its log-likelihood, `log_likelihoods`).

    Returns accuracy (good > bad counts 1, a tie 1/2), pairs, mean_pll_difference (good minus
    bad, nats), group_by and groups: {value: the same three figures} per value of the field
    `group_by` (None: "UID" when some pair has it, else "file" when some pair has that, as
    `read_pairs` gives the pairs of a directory, else no groups; "" : no groups), and with
    groups mean_group_accuracy, the mean of their accuracies, each group counted once (BLiMP's
    overall figure: the mean over its paradigms). A pair without the field falls in the group
    "(none)".
    """
    if not pairs:
        raise UserError("no minimal pairs to score")
    for i, pair in enumerate(pairs):
        _check_pair(pair, f"pair {i + 1}")
    if group_by is None:
        group_by = next((g for g in (DEFAULT_GROUP, FILE_GROUP) if any(g in p for p in pairs)),
                        "")
    elif group_by and not any(group_by in p for p in pairs):
        raise UserError(f"no pair has the field {group_by!r} to group by")
    sentences = [p[GOOD] for p in pairs] + [p[BAD] for p in pairs]
    if isinstance(model, ElectraModel):
        scores = np.asarray(detection_log_likelihood(model, tokenizer, sentences, batch_size,
                                                     device))
    elif model.config.causal:
        scores = np.asarray(log_likelihoods(model, tokenizer, sentences, batch_size, device))
    else:
        scores, _, _ = _distinct_pll(model, tokenizer, sentences, batch_size, device,
                                     metric=metric, progress=progress)
    good, bad = scores[:len(pairs)], scores[len(pairs):]
    groups = {}
    if group_by:
        values = np.array([str(p.get(group_by, "(none)")) for p in pairs], dtype=object)
        for value in sorted(set(values)):
            chosen = values == value
            groups[value] = _pair_figures(good[chosen], bad[chosen])
    mean_group = float(np.mean([g["accuracy"] for g in groups.values()])) if groups else None
    return {**_pair_figures(good, bad), "mean_group_accuracy": mean_group,
            "group_by": group_by or None, "groups": groups}


def detection_log_likelihood(model: ElectraModel, tokenizer, sentences: Sequence[str],
                             batch_size: int = 256,
                             device: str | torch.device = "cpu") -> list[float]:
    """ELECTRA's discriminator as a scorer: per sentence, the sum over its non-special pieces
    of log P(original) = log sigmoid(-logit), natural log, from one pass over the sentence as
    it is (no copies, no [MASK]). Each distinct sentence is scored once; a sentence longer
    than the model's positions is a UserError naming it."""
    distinct = list(dict.fromkeys(sentences))
    flat, lengths, special = _encode(tokenizer, distinct, _max_length(model, tokenizer), False,
                                     names=[f"sentence {s[:60]!r}" for s in distinct])
    starts = np.concatenate(([0], lengths.cumsum()[:-1])).astype(np.int64)
    scores = np.zeros(len(distinct))
    order = np.argsort(lengths, kind="stable")
    device = torch.device(device)
    with _eval_mode(model):
        for i in range(0, len(order), batch_size):
            chunk = order[i:i + batch_size]
            pick = np.concatenate([np.arange(starts[c], starts[c] + lengths[c]) for c in chunk])
            rows = _padded(flat[pick], lengths[chunk], tokenizer.pad_id)
            keep = _padded(~special[pick], lengths[chunk], 0).astype(bool)
            ids = torch.from_numpy(rows).to(device)
            attention = (torch.arange(rows.shape[1])[None, :]
                         < torch.from_numpy(lengths[chunk])[:, None]).long().to(device)
            logits = model(ids, torch.zeros_like(ids), attention).float()  # [C, T]
            original = F.logsigmoid(-logits) * torch.from_numpy(keep).to(device)
            scores[chunk] = original.sum(-1).double().cpu().numpy()
    index = {s: i for i, s in enumerate(distinct)}
    return [float(scores[index[s]]) for s in sentences]


DETECTION_SCORING = "replaced-token detection"
"""How `evaluate` names the ELECTRA discriminator's sentence score (`detection_log_likelihood`)."""


def _evaluate_electra(model_dir: Path, inp: Path, pairs: bool, tokenizer, opts: LMEvalOptions,
                      batch_size: int, device) -> dict:
    """`evaluate_pretrained` of an ELECTRA directory: held-out figures of both networks
    (the generator's masked tokens, the discriminator's detection accuracy and AUC); minimal
    pairs scored by the discriminator; a text file's masked-token scores by the generator. A
    discriminator alone (transformers' ElectraForPreTraining) judges minimal pairs only."""
    model = load_electra(model_dir, device)
    if model.generator is None and not pairs:
        raise UserError(f"{model_dir}: an ELECTRA discriminator without its generator "
                        f"(generator/): it judges minimal pairs, not masked tokens")
    if inp.is_dir() and not pairs and not is_dataset_dir(inp):
        return {"kind": "heldout", **heldout_scores(
            model, inp, objective="electra", seq_len=opts.seq_len,
            batch_size=opts.pretrain_batch_size, eval_batches=opts.eval_batches, seed=opts.seed,
            whole_word=opts.whole_word, mask_rate=opts.mask_rate, row_ends=opts.row_ends,
            mask_frac=opts.mask_frac, random_frac=opts.random_frac, device=device)}
    if pairs:
        report = minimal_pairs(model, tokenizer, read_pairs(inp), group_by=opts.group_by,
                               batch_size=4 * batch_size, device=device)
        return {"kind": "minimal_pairs", "scored_by": DETECTION_SCORING,
                "score": "sum of log P(original) over the pieces", **report}
    generator = dataclasses.replace(opts, objective="mlm")
    return {**_text_figures(model.generator, tokenizer, inp, generator, batch_size, device),
            "scored_by": "generator"}


# What `bertkit evaluate` runs on a pretrained model --------------------------------------------

def evaluate_pretrained(model_dir: str | os.PathLike, input_path: str | os.PathLike,
                        options: LMEvalOptions | None = None, batch_size: int = 64,
                        device: str | torch.device = "cpu", progress: bool = False) -> dict:
    """Judge the pretrained model of `model_dir` on `input_path`, by what the input is:

    - a directory written by `bertkit prepare`: held-out masked-token accuracy, loss and
      perplexity, as pretraining logs them (kind "heldout");
    - a .jsonl file of minimal pairs, or a directory of them (BLiMP's layout):
      `minimal_pairs` (kind "minimal_pairs");
    - any other text file: its non-blank lines' masked-token scores and pseudo-perplexity
      (kind "text").

    A left-to-right model (pretrained with --objective clm: config.json says "is_decoder")
    is judged by next-token prediction instead: held-out figures with the clm objective, and
    on a text file next-token loss, accuracy and perplexity = exp(mean loss) (kind
    "next_token").

    batch_size: texts per forward pass for masked-token scores; masked copies per forward pass
    (four times as many) for pseudo-log-likelihoods. progress: the pseudo-log-likelihoods'
    progress on stderr, a forward pass a piece (the other figures take one a text or batch).
    """
    opts = options or LMEvalOptions()
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {batch_size}")
    inp = Path(input_path)
    if not inp.exists():
        raise UserError(f"{inp}: no such file or directory")
    model_dir = resolve_model(model_dir)  # a directory, or a name in the local HF cache
    tokenizer = Tokenizer.load(model_dir)
    pairs = is_pairs_file(inp)
    if inp.is_dir() and not pairs and not is_dataset_dir(inp):  # texts: `numbered_texts`
        if not (inp / "manifest.json").is_file():
            raise UserError(f"{inp}: neither a finished `bertkit prepare` output (no "
                            f"manifest.json: re-run prepare to finish it) nor a directory of "
                            f"minimal-pair .jsonl files nor a `datasets` directory of texts")
        load_manifest(inp)
        check_tokenizer(inp, tokenizer)
    if has_detector(model_dir):
        return _evaluate_electra(model_dir, inp, pairs, tokenizer, opts, batch_size, device)
    model = load_pretraining_model(model_dir, device)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise UserError(f"{model_dir}: the tokenizer's {tokenizer.vocab_size} pieces do not fit "
                        f"the model's vocabulary of {model.config.vocab_size}")
    # A left-to-right model is judged as one: next-token figures, whatever --objective says.
    causal = model.config.causal
    if inp.is_dir() and not pairs and not is_dataset_dir(inp):
        return {"kind": "heldout", **_heldout_figures(model, model_dir, inp, opts, causal,
                                                      device)}
    if pairs:
        report = minimal_pairs(model, tokenizer, read_pairs(inp), group_by=opts.group_by,
                               batch_size=4 * batch_size, device=device, metric=opts.pll,
                               progress=progress)
        scored_by = ({"scored_by": "log-likelihood"} if causal else
                     {"scored_by": "pseudo-log-likelihood", "pll": opts.pll})
        return {"kind": "minimal_pairs", **scored_by, **report}
    return _text_figures(model, tokenizer, inp, opts, batch_size, device, causal, progress)


def _text_figures(model: nn.Module, tokenizer, inp: Path, opts: LMEvalOptions,
                  batch_size: int, device, causal: bool = False, progress: bool = False) -> dict:
    """A text file's non-blank lines (or the texts of its records, `numbered_texts`):
    masked-token scores and pseudo-perplexity (kind "text"), or for a left-to-right model
    next-token figures (kind "next_token")."""
    lines = []
    for _, _, line in numbered_texts(inp, opts.text_field):
        if line.strip():
            lines.append(line)
            if opts.max_lines is not None and len(lines) >= opts.max_lines:
                break
    if not lines:
        raise UserError(f"{inp}: no text to score (an empty file)")
    if causal:
        return {"kind": "next_token", **next_token_scores(model, tokenizer, lines, batch_size,
                                                          device)}
    mask_frac, random_frac = _corruption(opts.mask_frac, opts.random_frac, 1.0, 0.0)
    masked = masked_token_scores(model, tokenizer, lines, mask_rate=opts.mask_rate,
                                 seed=opts.seed, batch_size=batch_size, device=device,
                                 mask_frac=mask_frac, random_frac=random_frac,
                                 whole_word=opts.whole_word)
    pseudo = pseudo_perplexity(model, tokenizer, lines, batch_size=4 * batch_size,
                               device=device, metric=opts.pll, progress=progress)
    return {"kind": "text", **masked, **pseudo, "pll": opts.pll}


def _heldout_figures(model: nn.Module, model_dir: str | os.PathLike, data: Path,
                     opts: LMEvalOptions, causal: bool, device) -> dict[str, float]:
    """`heldout_scores` of a prepared directory as `evaluate_pretrained` asks: a left-to-right
    model by next-token prediction, the span objective with the directory's span head."""
    if causal:
        opts = dataclasses.replace(opts, objective="clm")
    objective = objective_named(opts.objective)
    model = objective.load_parts(model, Path(model_dir), device)
    return heldout_scores(model, data, objective=objective, seq_len=opts.seq_len,
                          batch_size=opts.pretrain_batch_size, eval_batches=opts.eval_batches,
                          seed=opts.seed, whole_word=opts.whole_word, mask_rate=opts.mask_rate,
                          row_ends=opts.row_ends, mask_frac=opts.mask_frac,
                          random_frac=opts.random_frac, device=device)


__all__ = ["LMEvalOptions", "masked_token_scores", "heldout_batches", "heldout_scores",
           "pseudo_log_likelihood", "pseudo_perplexity", "read_pairs", "is_pairs_file",
           "minimal_pairs", "evaluate_pretrained", "GOOD", "BAD", "DEFAULT_GROUP", "FILE_GROUP",
           "PLL_METRICS"]
