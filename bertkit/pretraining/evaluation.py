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

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from bertkit.files import UserError
from bertkit.model.generate import next_token_scores
from bertkit.model.hub import has_detector, load_config, load_electra, resolve_model
from bertkit.pretraining.provenance import check_tokenizer
from bertkit.pretraining.shards import load_manifest
from bertkit.pretraining.detection_scores import DETECTION_SCORING, detection_log_likelihood
from bertkit.pretraining.examples import ROW_ENDS
from bertkit.pretraining.held_out_split import (MIN_SCORED_TOKENS, corruption,  # noqa: F401
                                                heldout_batches, heldout_scores,
                                                recorded_document_boundaries)
from bertkit.pretraining.objectives import (OBJECTIVES, Electra, LeftToRight, MaskedLM,
                                            objective_named)
from bertkit.pretraining.pseudo_likelihood import (BAD, DEFAULT_GROUP, FILE_GROUP,  # noqa: F401
                                                   GOOD, PLL_METRICS, is_pairs_file,
                                                   minimal_pairs, pseudo_log_likelihood,
                                                   pseudo_perplexity, read_pairs)
from bertkit.pretraining.sentence_rows import encode as _encode
from bertkit.pretraining.sentence_rows import eval_mode as _eval_mode
from bertkit.pretraining.sentence_rows import masked_logits as _masked_logits
from bertkit.pretraining.sentence_rows import max_length as _max_length
from bertkit.pretraining.sentence_rows import padded as _padded
from bertkit.pretraining.sentence_rows import word_begins
from bertkit.text.sources import is_dataset_dir, numbered_texts
from bertkit.text.tokenizer import Tokenizer
from bertkit.text.windows import window_rows



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
    document_boundaries: bool | None = None
    """Prepared directory: pretraining's --document-boundaries (each document of a packed
    row scored as if alone); none: as the model's run recorded it (its training_args.json),
    else off."""
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


# Masked-token accuracy, loss and perplexity --------------------------------------------------

def masked_token_scores(model: nn.Module, tokenizer, texts: Sequence[str],
                        mask_rate: float = 0.15, seed: int = 0, batch_size: int = 64,
                        device: str | torch.device = "cpu", mask_frac: float | None = None,
                        random_frac: float | None = None, whole_word: bool = False,
                        windows: bool = False) -> dict[str, float]:
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

    windows: a text longer than the model's positions is read whole, in windows
    (`bertkit.text.windows`), each window masking the sample's pieces it holds and predicting
    those where it is most central; the sample is drawn from the whole texts.

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
    longest = _max_length(model, tokenizer)
    flat, lengths, special = _encode(tokenizer, texts, None if windows else longest,
                                     truncate=not windows)
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
    scored = None
    if windows:
        rows = window_rows(lengths, longest)
        flat, lengths, sample = flat[rows.source], rows.lengths, sample.taken(rows.source)
        inputs, scored = None if inputs is None else inputs[rows.source], rows.owned
    loss_sum, correct, count = _score_sample(model, tokenizer, flat, lengths, sample, inputs,
                                             batch_size, torch.device(device), scored)
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
        begins = word_begins(tokenizer, flat, special)
        word_of = np.cumsum(begins) - 1
        chosen_word = _sample(text_of[begins], len(lengths), mask_rate, seed)
        return cls(~special & chosen_word[np.maximum(word_of, 0)], word_of, chosen_word,
                   np.zeros(len(chosen_word), dtype=np.int64))

    def taken(self, source: np.ndarray) -> _MaskedSample:
        """The sample of the pieces `source` (windows of the texts), words shared."""
        return dataclasses.replace(self, chosen=self.chosen[source], word_of=None
                                   if self.word_of is None else self.word_of[source])


def _score_sample(model: nn.Module, tokenizer, flat: np.ndarray, lengths: np.ndarray,
                  sample: _MaskedSample, inputs: np.ndarray | None, batch_size: int,
                  device: torch.device, scored: np.ndarray | None = None
                  ) -> tuple[float, int, int]:
    """(summed loss, right, predicted) over the sample, `batch_size` texts per forward pass
    in order of length; `inputs` [P]: what each piece becomes (None: [MASK]). `scored` [P]
    (windows): the sample's pieces predicted here; the rest are only corrupted."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    if scored is not None:
        hidden = sample.chosen & ~scored
        flat = np.where(hidden, tokenizer.mask_id if inputs is None else inputs, flat)
        sample = dataclasses.replace(sample, chosen=sample.chosen & scored)
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
            model, inp, objective=Electra(), seq_len=opts.seq_len,
            batch_size=opts.pretrain_batch_size, eval_batches=opts.eval_batches, seed=opts.seed,
            whole_word=opts.whole_word, mask_rate=opts.mask_rate, row_ends=opts.row_ends,
            mask_frac=opts.mask_frac, random_frac=opts.random_frac,
            document_boundaries=_document_boundaries(opts, model_dir, Electra()),
            device=device)}
    if pairs:
        report = minimal_pairs(model, tokenizer, read_pairs(inp), group_by=opts.group_by,
                               scorer=lambda sentences: detection_log_likelihood(
                                   model, tokenizer, sentences, 4 * batch_size, device))
        return {"kind": "minimal_pairs", "scored_by": DETECTION_SCORING,
                "score": "sum of log P(original) over the pieces", **report}
    generator = dataclasses.replace(opts, objective=MaskedLM.name)
    return {**_text_figures(model.generator, tokenizer, inp, generator, batch_size, device),
            "scored_by": "generator"}


# What `bertkit evaluate` runs on a pretrained model --------------------------------------------

def evaluate_pretrained(model_dir: str | os.PathLike, input_path: str | os.PathLike,
                        options: LMEvalOptions | None = None, batch_size: int = 64,
                        device: str | torch.device = "cpu", progress: bool = False,
                        windows: bool = False) -> dict:
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
    windows: a masked LM's text file, its lines longer than the model read in windows
    (`masked_token_scores`, `pseudo_perplexity`), where they are cut by default.
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
    if has_detector(model_dir) and windows:
        raise UserError("--long-inputs windows: an ELECTRA directory is judged by its "
                        "generator and detector as they are, its texts cut")
    if has_detector(model_dir):
        return _evaluate_electra(model_dir, inp, pairs, tokenizer, opts, batch_size, device)
    # A left-to-right model is judged as one: next-token figures, whatever --objective says.
    causal = load_config(model_dir).causal
    if windows and (causal or pairs or (inp.is_dir() and not is_dataset_dir(inp))):
        raise UserError(f"--long-inputs windows: {inp} is no text file for a masked LM (its "
                        f"lines are scored in windows; held-out rows, minimal pairs and a "
                        f"left-to-right model's next tokens are not)")
    objective = objective_named(LeftToRight.name if causal else opts.objective)
    model = objective.saved_model(Path(model_dir), device)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise UserError(f"{model_dir}: the tokenizer's {tokenizer.vocab_size} pieces do not fit "
                        f"the model's vocabulary of {model.config.vocab_size}")
    if inp.is_dir() and not pairs and not is_dataset_dir(inp):
        return {"kind": "heldout", **_heldout_figures(model, model_dir, objective, inp, opts,
                                                      device)}
    if pairs:
        report = minimal_pairs(model, tokenizer, read_pairs(inp), group_by=opts.group_by,
                               batch_size=4 * batch_size, device=device, metric=opts.pll,
                               progress=progress)
        scored_by = ({"scored_by": "log-likelihood"} if causal else
                     {"scored_by": "pseudo-log-likelihood", "pll": opts.pll})
        return {"kind": "minimal_pairs", **scored_by, **report}
    return _text_figures(model, tokenizer, inp, opts, batch_size, device, causal, progress,
                         windows)


def _text_figures(model: nn.Module, tokenizer, inp: Path, opts: LMEvalOptions,
                  batch_size: int, device, causal: bool = False, progress: bool = False,
                  windows: bool = False) -> dict:
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
    mask_frac, random_frac = corruption(opts.mask_frac, opts.random_frac, 1.0, 0.0)
    masked = masked_token_scores(model, tokenizer, lines, mask_rate=opts.mask_rate,
                                 seed=opts.seed, batch_size=batch_size, device=device,
                                 mask_frac=mask_frac, random_frac=random_frac,
                                 whole_word=opts.whole_word, windows=windows)
    pseudo = pseudo_perplexity(model, tokenizer, lines, batch_size=4 * batch_size,
                               device=device, metric=opts.pll, progress=progress,
                               windows=windows)
    return {"kind": "text", **masked, **pseudo, "pll": opts.pll}


def _heldout_figures(model: nn.Module, model_dir: Path, objective, data: Path,
                     opts: LMEvalOptions, device) -> dict[str, float]:
    """`heldout_scores` of a prepared directory as `evaluate_pretrained` asks: by the
    objective's figures (a left-to-right model's: next-token prediction), its rows packed as
    the model's run packed them."""
    return heldout_scores(model, data, objective=objective, seq_len=opts.seq_len,
                          batch_size=opts.pretrain_batch_size, eval_batches=opts.eval_batches,
                          seed=opts.seed, whole_word=opts.whole_word, mask_rate=opts.mask_rate,
                          row_ends=opts.row_ends, mask_frac=opts.mask_frac,
                          random_frac=opts.random_frac,
                          document_boundaries=_document_boundaries(opts, model_dir, objective),
                          device=device)


def _document_boundaries(opts: LMEvalOptions, model_dir: str | os.PathLike, objective) -> bool:
    """--document-boundaries as given, else as the model's run recorded it."""
    if opts.document_boundaries is not None:
        return opts.document_boundaries
    return recorded_document_boundaries(model_dir, objective)


__all__ = ["LMEvalOptions", "masked_token_scores", "heldout_batches", "heldout_scores",
           "pseudo_log_likelihood", "pseudo_perplexity", "read_pairs", "is_pairs_file",
           "minimal_pairs", "evaluate_pretrained", "GOOD", "BAD", "DEFAULT_GROUP", "FILE_GROUP",
           "PLL_METRICS", "detection_log_likelihood", "DETECTION_SCORING", "MIN_SCORED_TOKENS",
           "recorded_document_boundaries"]
