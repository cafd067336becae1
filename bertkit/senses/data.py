"""Sense-labelled examples: reading and checking them, and a reproducible train/test split.

One JSON object per line, the target word at `text[start:end]`:

    {"lemma": "bank", "pos": "noun", "synset": "09213565-n", "sense_rank": 2,
     "gloss": "sloping land (especially the slope beside a body of water)",
     "text": "they pulled the canoe up on the bank", "start": 32, "end": 36}

`lemma`, `text`, `start`, `end` are always needed; `synset` (the sense label; `sense` is
read as another name for it) for training and evaluation; `pos`, `sense_rank` (1 = most frequent, as in WordNet / SemCor) and `gloss`
are used when present. Every problem is reported as FILE:LINE.

The vectors of examples come from a `ContextualSource` (a BERT-style encoder: the target's
word vector, the text's sentence vector) or a `StaticSource` (static word vectors: the mean
vector of the words around the target, of the words of a text).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.static import StaticVectors
from bertkit.files import UserError, atomic_file, read_jsonl
from bertkit.model.kind import ModelKind, model_kind

# Forms that share no first letter with their lemma; any other inflection does.
_SUPPLETIVE = {"be": {"is", "am", "are", "was", "were", "'s", "'re", "'m", "ai"},
               "go": {"went"}}


@dataclass(frozen=True)
class SenseExample:
    """One target word in context, with its sense when known."""

    lemma: str
    text: str
    start: int
    end: int
    """The target is text[start:end] (character offsets, end exclusive)."""
    pos: str = ""
    """Part of speech ("noun", "verb", ...); "" when not given."""
    synset: str | None = None
    """The sense label; None in data to be labelled."""
    sense_rank: int | None = None
    """Rank of the sense among its lemma's senses by frequency, 1 = most frequent."""
    gloss: str | None = None
    """The sense's dictionary definition."""
    where: str = ""
    """FILE:LINE it came from, for messages."""

    @property
    def key(self) -> tuple[str, str]:
        """(lemma, pos): whose senses are the candidates."""
        return (self.lemma, self.pos)

    @property
    def target(self) -> str:
        return self.text[self.start:self.end]


def _field(obj: dict, name: str, kind, where: str, required: bool):
    value = obj.get(name)
    if value is None:
        if required:
            raise UserError(f"{where}: missing field {name!r}")
        return None
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        expected = "an integer" if kind is int else "a string"
        raise UserError(f"{where}: field {name!r} must be {expected}, got "
                        f"{type(value).__name__} {value!r}")
    return value


def check_target(lemma: str, text: str, start: int, end: int, where: str) -> None:
    """The span must lie inside the text, on word boundaries, and look like a form of the
    lemma (same first letter, or a known suppletive form such as went/go)."""
    if not 0 <= start < end <= len(text):
        raise UserError(f"{where}: span start={start} end={end} is outside the text "
                        f"({len(text)} characters) or empty")
    target = text[start:end]
    if target != target.strip() or not any(c.isalnum() for c in target):
        raise UserError(f"{where}: span {start}:{end} is {target!r}, not a word")
    if (start > 0 and text[start - 1].isalnum()) or (end < len(text) and text[end].isalnum()):
        raise UserError(f"{where}: span {start}:{end} ({target!r}) cuts a word of the text "
                        f"({text[max(start - 10, 0):end + 10]!r})")
    form, base = target.lower(), lemma.lower().replace("_", " ")
    if form[0] != base[0] and form not in _SUPPLETIVE.get(base, ()):
        raise UserError(f"{where}: the span text {target!r} does not match the lemma {lemma!r} "
                        f"(check start/end)")


def read_examples(path: str | os.PathLike, labelled: bool = True) -> list[SenseExample]:
    """Read and check every line of a sense-labelled JSON-lines file: the one reader of the
    format (the WSD commands and the sense plots use it).

    `labelled=True` requires the `synset` field (training, evaluation); prediction input may
    lack it.
    """
    out = []
    for number, obj in read_jsonl(path, "sense-labelled data"):
        where = f"{path}:{number}"
        lemma = _field(obj, "lemma", str, where, True)
        text = _field(obj, "text", str, where, True)
        start = _field(obj, "start", int, where, True)
        end = _field(obj, "end", int, where, True)
        if not lemma.strip():
            raise UserError(f"{where}: empty lemma")
        check_target(lemma, text, start, end, where)
        synset = _field(obj, "synset" if "synset" in obj or "sense" not in obj else "sense",
                        str, where, labelled)
        rank = _field(obj, "sense_rank", int, where, False)
        if rank is not None and rank < 1:
            raise UserError(f"{where}: sense_rank must be 1 or more, got {rank}")
        out.append(SenseExample(lemma=lemma, text=text, start=start, end=end,
                                pos=_field(obj, "pos", str, where, False) or "",
                                synset=synset, sense_rank=rank,
                                gloss=_field(obj, "gloss", str, where, False), where=where))
    if not out:
        raise UserError(f"{path}: no examples (only blank lines)")
    return out


def split_examples(examples: Sequence[SenseExample], fraction: float = 0.3,
                   seed: int = 0) -> tuple[list[SenseExample], list[SenseExample]]:
    """A reproducible held-out split that keeps every test sense in training.

    For each sense (lemma, pos, synset), one instance drawn at random stays in training and
    each of the others goes to the test side with probability `fraction`. Senses seen once
    therefore never reach the test side: a nearest-sense method could not get them right,
    and that would measure the split, not the method. Returns (train, test), each in file
    order.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    by_sense: dict[tuple, list[int]] = {}
    for i, e in enumerate(examples):
        if e.synset is None:
            raise UserError(f"{e.where}: no synset: only labelled data can be split")
        by_sense.setdefault((e.lemma, e.pos, e.synset), []).append(i)
    test = np.zeros(len(examples), dtype=bool)
    for members in by_sense.values():  # dicts keep file order: the draws are reproducible
        held = rng.random(len(members)) < fraction
        held[rng.integers(len(members))] = False
        test[members] = held
    return ([e for e, t in zip(examples, test) if not t],
            [e for e, t in zip(examples, test) if t])


def write_examples(examples: Sequence[SenseExample], path: str | Path) -> None:
    """Write examples back as JSON lines (atomically), fields as read."""
    with atomic_file(path) as f:
        for e in examples:
            obj = {"lemma": e.lemma, "pos": e.pos or None, "synset": e.synset,
                   "sense_rank": e.sense_rank, "gloss": e.gloss, "text": e.text,
                   "start": e.start, "end": e.end}
            f.write(json.dumps({k: v for k, v in obj.items() if v is not None},
                               ensure_ascii=False) + "\n")


# Where vectors come from -------------------------------------------------------------------------

class ContextualSource:
    """Word and sentence vectors from a BERT-style encoder (an `Embedder`)."""

    kind = "contextual"

    def __init__(self, embedder, layers: str = "last4", subword_pool: str = "mean",
                 batch_size: int = 32, progress: bool = True):
        self.embedder, self.layers, self.subword_pool = embedder, layers, subword_pool
        self.batch_size, self.progress = batch_size, progress

    def targets(self, examples: Sequence[SenseExample]) -> np.ndarray:
        try:
            return self.embedder.word_vectors(
                [e.text for e in examples], [(e.start, e.end) for e in examples],
                layers=self.layers, subword_pool=self.subword_pool,
                batch_size=self.batch_size, progress=self.progress)
        except ValueError as e:  # names "target i": say which line that is
            message = str(e)
            if message.startswith("target "):
                i = int(message.split()[1].rstrip(":"))
                message = f"{examples[i].where}: {message.split(':', 1)[1].strip()}"
            raise UserError(message) from None

    def sentences(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed(list(texts), layers=-1, pool="mean", normalize=False,
                                   batch_size=self.batch_size, progress=self.progress)


class StaticSource:
    """What a static model offers: the mean vector of the words around the target, and the
    mean vector of a text's words."""

    kind = "static"

    def __init__(self, vectors, window: int = 5):
        self.vectors, self.window = vectors, window

    def targets(self, examples: Sequence[SenseExample]) -> np.ndarray:
        return self.vectors.context_vectors([e.text for e in examples],
                                            [(e.start, e.end) for e in examples], self.window)

    def sentences(self, texts: Sequence[str]) -> np.ndarray:
        return self.vectors.text_vectors(list(texts))


def load_source(model: str | Path, *, layers: str = "last4", subword_pool: str = "mean",
                window: int = 5, batch_size: int = 32, progress: bool = True,
                device: str = "cpu"):
    """A ContextualSource for a BERT directory, a StaticSource for `bertkit static` output."""
    if model_kind(model) is ModelKind.STATIC:
        return StaticSource(StaticVectors.load(model), window)
    return ContextualSource(Embedder.load(model, device=device), layers, subword_pool,
                            batch_size, progress)


@dataclass(kw_only=True)
class SplitSettings:
    """How `split_examples` holds instances out (`bertkit wsd split`)."""

    fraction: float = 0.5
    """Chance that a non-reserved instance is held out."""
    seed: int = 0
    """Seeds the split."""

    def split(self, examples: Sequence[SenseExample]
              ) -> tuple[list[SenseExample], list[SenseExample]]:
        """(training, held-out): `split_examples` with these settings."""
        return split_examples(examples, self.fraction, self.seed)


@dataclass(kw_only=True)
class WsdRun:
    """How the model that gives the word vectors runs."""

    batch_size: int = 32
    """Texts per forward pass."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    quiet: bool = False
    """No progress on stderr."""

    def source(self, model: str | Path, options):
        """The source of word vectors in `model`, with the layers, subword pooling and window
        of `options` (a WsdOptions)."""
        return load_source(model, layers=options.layers, subword_pool=options.subword_pool,
                           window=options.window, batch_size=self.batch_size,
                           progress=not self.quiet, device=self.device)


__all__ = ["SenseExample", "check_target", "read_examples", "split_examples", "write_examples",
           "ContextualSource", "StaticSource", "load_source", "SplitSettings", "WsdRun"]
