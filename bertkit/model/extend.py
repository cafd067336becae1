"""A model whose vocabulary grows: the domain's most useful words (`bertkit.text.extend`) added
to its tokenizer, and a row for each in every weight indexed by the vocabulary.

Those weights are the word embeddings and the masked-LM decoder: its bias, and its weight where
a checkpoint keeps an untied copy (bertkit ties it to the embeddings). A new word's row in each
starts at the mean of the rows of the old pieces it was split into, so that before any
training the model reads "moviegoer" about as it read "movie ##go ##er" (the initialisation of
transformers' `resize_token_embeddings` users, and of Hewitt 2021's argument against random
rows, here per word).

The result is the same kind of directory as the input (its config.json kept, `vocab_size`
changed; every other weight byte for byte; a sentence-transformers pipeline copied), which
bertkit, `transformers` and sentence-transformers load.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import save_file

from bertkit.files import UserError, atomic_dir, check_not_input, read_json
from bertkit.model.hub import load_config, load_weights
from bertkit.model.kind import ModelKind, require_kind
from bertkit.text.extend import (NewWord, check_extendable, check_request, choose_words,
                                 count_words, domain_pieces, extend_tokenizer)
from bertkit.text.sources import expand
from bertkit.text.tokenizer import Tokenizer, check_fits

VOCABULARY_ROWS = re.compile(r"(word_embeddings|tok_embeddings)\.weight$"
                             r"|(^|\.)(predictions\.bias|decoder\.weight|decoder\.bias)$")
"""Hugging Face names of the weights with one row per vocabulary entry (BERT, ModernBERT)."""
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
"""sentence-transformers' description of a sentence model, which the vocabulary leaves as it was
(with the folders of the modules that modules.json names: 1_Pooling, 2_Normalize, ...)."""


@dataclass(frozen=True)
class Extension:
    """What `extend_vocabulary` added and what it saves on the domain text."""
    words: list[NewWord]
    """The added words, most useful first; ids from `first_id` on."""
    first_id: int
    vocab_size: tuple[int, int]
    """The model's vocabulary before and after."""
    pieces: tuple[int, int]
    """Pieces of the domain text before and after (the new tokenizer also splits some other
    words differently: "gorey" as "gore ##y" once "gore" is a word)."""
    tokenizer: Tokenizer


def vocabulary_weights(weights: dict[str, torch.Tensor], vocab_size: int,
                       where: str | Path) -> list[str]:
    """The names of `weights` indexed by the vocabulary (`VOCABULARY_ROWS`, first dimension
    `vocab_size`); a UserError when the word embeddings are not among them."""
    names = [k for k, v in weights.items()
             if VOCABULARY_ROWS.search(k) and v.dim() in (1, 2) and v.shape[0] == vocab_size]
    if not any("embeddings" in k for k in names):
        raise UserError(f"{where}: no word embeddings of {vocab_size} rows among its weights "
                        f"(not a BERT or ModernBERT checkpoint?)")
    return names


def sentence_pipeline(path: Path) -> list[str]:
    """The sentence-transformers files and module folders of the model directory `path`."""
    names = [n for n in SENTENCE_FILES if (path / n).is_file()]
    modules = read_json(path / SENTENCE_FILES[0], "sentence-transformers modules file") \
        if SENTENCE_FILES[0] in names else []
    folders = [str(m.get("path")) for m in modules if isinstance(m, dict)] \
        if isinstance(modules, list) else []
    return names + [f for f in folders if f and Path(f).name == f != ".." and (path / f).is_dir()]


def grow_rows(weights: dict[str, torch.Tensor], names: Sequence[str], size: int,
              pieces: Sequence[Sequence[int]], first: int) -> dict[str, torch.Tensor]:
    """`weights` with each of `names` grown to `size` rows, row first + i set to the mean of
    the rows `pieces[i]` (computed in fp32), the others as they were."""
    out = dict(weights)
    for name in names:
        old = weights[name]
        grown = torch.zeros((size, *old.shape[1:]), dtype=old.dtype)
        grown[:len(old)] = old
        for i, ids in enumerate(pieces):
            grown[first + i] = old[list(ids)].float().mean(0).to(old.dtype)
        out[name] = grown
    return out


def extend_vocabulary(model: str | Path, files: Sequence[str | Path], add: int,
                      out: str | Path, *, min_count: int = 2, text_field: str = "text",
                      progress: bool = True) -> Extension:
    """Add to the model directory `model` the `add` words of the domain text that save the
    most pieces (seen at least `min_count` times), with their rows, and save it to `out`.
    `files`: files, folders, globs or `datasets` directories in any format `prepare` reads
    (`bertkit.text.sources`); `text_field` names the text of a JSON line or a table row.

    Every input is checked before the text is read; `out` appears whole or not at all.
    """
    check_request(add, min_count)
    path = require_kind(model, ModelKind.ENCODER)  # a task model's head would not come along
    config = load_config(path)
    tokenizer = Tokenizer.load(path)
    check_fits(tokenizer, config, path)
    check_extendable(tokenizer, path)
    if not files:
        raise UserError("no domain text given (--input)")
    sources = expand(files, text_field, "domain text", [out])
    check_not_input(out, [path, *(s.path for s in sources)],
                    names=["--model"] + ["--input"] * len(sources))
    pipeline = sentence_pipeline(path)
    weights = load_weights(path)
    names = vocabulary_weights(weights, config.vocab_size, path)
    counts = count_words(tokenizer, sources, progress)
    words = choose_words(tokenizer, counts, add, min_count)
    if not words:
        raise UserError(f"{sources[0].path}: no word seen {min_count}+ times is split into "
                        f"several pieces by the tokenizer: nothing to add")
    grown = extend_tokenizer(tokenizer, words)
    size = max(config.vocab_size, grown.vocab_size)
    weights = grow_rows(weights, names, size, [w.pieces for w in words], tokenizer.vocab_size)
    hf_config = read_json(path / "config.json", "config.json")
    hf_config["vocab_size"] = size
    with atomic_dir(out, replaces=SENTENCE_FILES) as tmp:  # an earlier run's, if not copied
        save_file({k: v.contiguous() for k, v in weights.items()},
                  str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n",
                                         encoding="utf-8")
        grown.save(tmp)
        for name in pipeline:
            (shutil.copytree if (path / name).is_dir() else shutil.copy)(path / name, tmp / name)
    return Extension(words, tokenizer.vocab_size, (config.vocab_size, size),
                     (domain_pieces(tokenizer, counts), domain_pieces(grown, counts)), grown)
