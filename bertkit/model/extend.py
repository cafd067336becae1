"""A model whose vocabulary grows: the domain's most useful words (`bertkit.text.extend`) added
to its tokenizer, and a row for each in every weight indexed by the vocabulary.

Those weights are the word embeddings and the masked-LM decoder: its bias, and its weight where
a checkpoint keeps an untied copy (bertkit ties it to the embeddings). A new word's row in each
starts at the mean of the rows of the old pieces it was split into, so that before any
training the model reads "moviegoer" about as it read "movie ##go ##er" (the initialisation of
transformers' `resize_token_embeddings` users, and of Hewitt 2021's argument against random
rows, here per word).

A new character (one the vocabulary lacked, `bertkit.text.extend.missing_chars`) has no old
pieces but one: the model read it as [UNK], so its rows start as the [UNK] rows. It is what
the model has learned for "a character I do not know", the closest meaning it has, so before
any training the model reads "great😀" (now `great ##😀`) much as it read `[UNK]`. Each new
piece's logit is then [UNK]'s, so none is more likely than [UNK] was (rare, in a model that
met these characters only as [UNK]), where the mean of all rows (Hewitt 2021's choice for a
word without pieces) would make each as likely as an average piece, on every masked position.

The result is the same kind of directory as the input (its config.json kept, `vocab_size`
changed; every other weight byte for byte; a sentence-transformers pipeline copied), which
bertkit, `transformers` and sentence-transformers load. Its model card (README.md) is the
input's with a section saying what was added, from which text, and the command that does it
again (`bertkit.model.card`).
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import save_file

from bertkit.files import UserError, atomic_dir, check_not_input, read_json
from bertkit.model.card import CARD_FILE, card_with_section, read_card
from bertkit.model.hub import load_config, load_weights
from bertkit.model.kind import ModelKind, require_kind
from bertkit.progress import counted
from bertkit.text.extend import (NewChar, NewWord, add_chars, check_extendable,
                                 check_request, choose_words, count_words, domain_pieces,
                                 domain_unknown, extend_tokenizer, missing_chars)
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
    chars: list[NewChar]
    """The added characters, most frequent first; their pieces take the ids from `first_id`
    on."""
    words: list[NewWord]
    """The added words, most useful first; ids after the characters' pieces."""
    first_id: int
    vocab_size: tuple[int, int]
    """The model's vocabulary before and after."""
    pieces: tuple[int, int]
    """Pieces of the domain text before and after (the new tokenizer also splits some other
    words differently: "gorey" as "gore ##y" once "gore" is a word)."""
    unknown: tuple[int, int]
    """[UNK] pieces of the domain text before and after."""
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


def extension_section(ext: Extension, model: str, inputs: Sequence[str], command: str,
                      below_a_card: bool) -> str:
    """The model card's section on `ext`, made from the model `model` and the domain text
    `inputs` (as given) by `command`."""
    first, last = ext.first_id, ext.tokenizer.vocab_size - 1
    (before, after), named = ext.vocab_size, ", ".join(f"`{i}`" for i in inputs)
    above = f" The card above is `{model}`'s." if below_a_card else ""
    return (f"This model is `{model}` with {counted(len(ext.words), 'word')} and "
            f"{counted(len(ext.chars), 'character')} added to its {ext.tokenizer.kind} "
            f"vocabulary by `bertkit tokenizer extend` ({counted(last - first + 1, 'piece')}, "
            f"ids {first}-{last} of vocab.txt; model rows {before} -> {after}): the characters "
            f"of the domain text {named} that it read as [UNK], and its words that the "
            f"vocabulary split into the most pieces.{above} A new word's rows in the "
            f"embeddings and the masked-LM decoder start at the mean of the rows of the pieces "
            f"it was split into, a new character's at the rows of [UNK]: they mean more once "
            f"the model is trained on text that holds them.\n\n"
            f"```bash\n{command}\n```")


def _command(model, files, add: int, out, min_count: int, max_chars: int | None,
             text_field: str) -> str:
    """The `bertkit tokenizer extend` line of these arguments, as the card shows it."""
    argv = ["bertkit", "tokenizer", "extend", "--model", str(model),
            "--input", *map(str, files)]
    argv += ["--text-field", text_field] if text_field != "text" else []
    argv += ["--add", str(add), "--min-count", str(min_count)]
    argv += ["--max-chars", str(max_chars)] if max_chars is not None else []
    return shlex.join(argv + ["--out", str(out)])


def extend_vocabulary(model: str | Path, files: Sequence[str | Path], add: int,
                      out: str | Path, *, min_count: int = 2, max_chars: int | None = None,
                      text_field: str = "text", progress: bool = True) -> Extension:
    """Add to the model directory `model` the characters of the domain text that it lacks
    (those of its [UNK]s, seen at least `min_count` times, at most `max_chars`: None, all),
    then the `add` words that save the most pieces (seen at least `min_count` times), with
    their rows, and save it to `out`.
    `files`: files, folders, globs or `datasets` directories in any format `prepare` reads
    (`bertkit.text.sources`); `text_field` names the text of a JSON line or a table row.

    Every input is checked before the text is read; `out` appears whole or not at all.
    """
    check_request(add, min_count, max_chars)
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
    pipeline, card = sentence_pipeline(path), read_card(path)
    weights = load_weights(path)
    names = vocabulary_weights(weights, config.vocab_size, path)
    counts = count_words(tokenizer, sources, progress)
    chars = missing_chars(tokenizer, counts, min_count, max_chars)
    lettered = add_chars(tokenizer, chars)
    words = choose_words(lettered, counts, add, min_count)
    if not words and not chars:
        raise UserError(f"{sources[0].path}: no word seen {min_count}+ times is split into "
                        f"several pieces by the tokenizer, and no character it lacks is seen "
                        f"{min_count}+ times: nothing to add")
    grown = extend_tokenizer(lettered, words)
    size = max(config.vocab_size, grown.vocab_size)
    weights = grow_rows(weights, names, max(config.vocab_size, lettered.vocab_size),
                        [(tokenizer.unk_id,)] * (lettered.vocab_size - tokenizer.vocab_size),
                        tokenizer.vocab_size)  # a new character's rows: see the docstring
    weights = grow_rows(weights, names, size, [w.pieces for w in words], lettered.vocab_size)
    hf_config = read_json(path / "config.json", "config.json")
    hf_config["vocab_size"] = size
    ext = Extension(chars, words, tokenizer.vocab_size, (config.vocab_size, size),
                    (domain_pieces(tokenizer, counts), domain_pieces(grown, counts)),
                    (domain_unknown(tokenizer, counts), domain_unknown(grown, counts)), grown)
    command = _command(model, files, add, out, min_count, max_chars, text_field)
    with atomic_dir(out, replaces=SENTENCE_FILES) as tmp:  # an earlier run's, if not copied
        save_file({k: v.contiguous() for k, v in weights.items()},
                  str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n",
                                         encoding="utf-8")
        grown.save(tmp)
        for name in pipeline:
            (shutil.copytree if (path / name).is_dir() else shutil.copy)(path / name, tmp / name)
        section = extension_section(ext, str(model), [str(f) for f in files], command,
                                    card is not None and bool(card.strip()))
        (tmp / CARD_FILE).write_text(card_with_section(card, "Vocabulary extended", section),
                                     encoding="utf-8")
    return ext
