"""A masked LM's pseudo-log-likelihood of sentences (Salazar et al. 2020) and minimal pairs
judged by it: see `bertkit.pretraining.evaluation` for the measures; `minimal_pairs` takes any
sentence scorer (a left-to-right model's log-likelihood, ELECTRA's detection score)."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from bertkit.files import UserError, format_suffix, read_jsonl, read_lines
from bertkit.model.generate import log_likelihoods
from bertkit.pretraining.sentence_rows import (encode, eval_mode, masked_logits, max_length,
                                               padded, word_begins)
from bertkit.progress import Progress
from bertkit.text.tokenizer import word_starts
from bertkit.text.windows import window_rows

GOOD, BAD = "sentence_good", "sentence_bad"
PLL_METRICS = ("original", "word-l2r")
DEFAULT_GROUP = "UID"
"""The grouping field of BLiMP lines, used when the pairs carry it and no other is asked for."""
FILE_GROUP = "file"
"""The field `read_pairs` gives the pairs of a directory (their file's name): the grouping
where they carry no UID."""


def _pll(model: nn.Module, tokenizer, sentences: Sequence[str], batch_size: int,
         device: torch.device, truncate: bool = False,
         names: Sequence[str] | None = None, metric: str = "original",
         progress: bool = False,
         windows: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pseudo-log-likelihood float64 [S], scored pieces int64 [S], scored words int64 [S])
    of distinct sentences (words by `word_begins`: a sentence cut to fit counts only the
    words it kept). `progress`: the masked copies scored, their rate and the ETA on stderr
    (a forward pass a piece: minutes for a few thousand lines on a CPU). `windows`: a
    sentence longer than the model is read in windows, each piece scored in the window where
    it is most central (`bertkit.text.windows`)."""
    if metric not in PLL_METRICS:
        raise ValueError(f"unknown PLL metric {metric!r}; choose one of {PLL_METRICS}")
    flat, lengths, special = encode(tokenizer, sentences, None if windows else
                                    max_length(model, tokenizer), truncate, names)
    words = np.repeat(np.arange(len(sentences)), lengths)[word_begins(tokenizer, flat, special)]
    row_text, owned = np.arange(len(sentences)), True  # a row a sentence, every piece scored
    if windows:
        rows = window_rows(lengths, max_length(model, tokenizer))
        flat, special, lengths = flat[rows.source], special[rows.source], rows.lengths
        row_text, owned = rows.text_of, rows.owned
    text_of = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    # One masked copy per non-special piece: (its sentence, its position in the sentence),
    # ordered by the sentence's length so that a batch pads little.
    piece = np.flatnonzero(~special & owned)
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
    rows = padded(flat, lengths, tokenizer.pad_id)
    scores = np.zeros(len(lengths), dtype=np.float64)
    bar = Progress("pseudo-log-likelihood", len(order), "masked copies", enabled=progress)
    with eval_mode(model):
        for start in range(0, len(order), batch_size):
            s = copy_sentence[start:start + batch_size]
            T = int(lengths[s].max())
            positions = np.arange(len(s)) * T + copy_position[start:start + batch_size]
            later = copy_later[start:start + batch_size]
            # flat indices positions[i] + 1 ... positions[i] + later[i], for every copy i
            also = (np.repeat(positions, later) + 1
                    + np.arange(int(later.sum())) - np.repeat(np.cumsum(later) - later, later))
            logp, targets = masked_logits(model, rows[s, :T], lengths[s], positions,
                                           tokenizer.mask_id, device, also)
            np.add.at(scores, s, logp.gather(1, targets[:, None]).squeeze(1).double().cpu()
                      .numpy())
            bar.update(add=len(s))
    bar.finish()
    return (np.bincount(row_text, scores, minlength=len(sentences)),
            np.bincount(row_text[copy_sentence], minlength=len(sentences)),
            np.bincount(words, minlength=len(sentences)))


def _distinct_pll(model, tokenizer, sentences: Sequence[str], batch_size: int, device,
                  truncate: bool = False, metric: str = "original",
                  progress: bool = False,
                  windows: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_pll` of each sentence, each distinct sentence scored once: equal sentences get equal
    scores exactly, whatever batch they would have fallen into."""
    distinct = list(dict.fromkeys(sentences))
    index = {s: i for i, s in enumerate(distinct)}
    where = np.fromiter((index[s] for s in sentences), dtype=np.int64, count=len(sentences))
    scores, pieces, words = _pll(model, tokenizer, distinct, batch_size, torch.device(device),
                                 truncate, names=[f"sentence {s[:60]!r}" for s in distinct],
                                 metric=metric, progress=progress, windows=windows)
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
                      metric: str = "original", progress: bool = False,
                      windows: bool = False) -> dict[str, float]:
    """pseudo_perplexity = exp(-sum PLL / pieces) over all texts, with pseudo_log_likelihood
    (the sum), pieces and texts, the PLL by `metric` (see `pseudo_log_likelihood`). Texts
    longer than the model's positions are cut to fit (`truncate`) or refused, or with
    `windows` read in windows, each piece scored in the one where it is most central.

    pseudo_perplexity_per_word = exp(-sum PLL / words), words as the tokenizer splits the text
    before it cuts pieces (WordPiece: at spaces and punctuation). Two vocabularies of one kind
    cut the same text into the same words but into different numbers of pieces, so this, not
    the per-piece figure, compares them; with metric "word-l2r", since the "original" PLL
    gives a word more help from its own neighbouring pieces the more pieces it is cut into."""
    scores, pieces, words = _distinct_pll(model, tokenizer, list(texts), batch_size, device,
                                          truncate, metric, progress, windows)
    total, n, w = float(scores.sum()), int(pieces.sum()), int(words.sum())
    if n == 0:
        raise UserError("no pieces to score: the texts are empty")
    return {"pseudo_perplexity": math.exp(-total / n), "pseudo_log_likelihood": total,
            "pieces": n, "texts": len(scores), "words": w,
            "pseudo_perplexity_per_word": math.exp(-total / w)}


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
                  progress: bool = False,
                  scorer: Callable[[list[str]], Sequence[float]] | None = None) -> dict:
    """How often the model's pseudo-log-likelihood (by `metric`, see `pseudo_log_likelihood`)
    prefers the good sentence of each pair (a left-to-right model, config.json "is_decoder":
    its log-likelihood, `log_likelihoods`); `scorer`: another score of sentences (ELECTRA's
    discriminator: `detection_log_likelihood`), higher for the more likely.

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
    if scorer is not None:
        scores = np.asarray(scorer(sentences))
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


__all__ = ["pseudo_log_likelihood", "pseudo_perplexity", "read_pairs", "is_pairs_file",
           "minimal_pairs", "GOOD", "BAD", "DEFAULT_GROUP", "FILE_GROUP", "PLL_METRICS"]
