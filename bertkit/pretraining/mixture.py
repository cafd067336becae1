"""Several corpora mixed by proportion: `pretrain --data books=0.7,web=0.3`.

    parts = parse_mixture("books=0.7,web=0.3")      # [(Path("books"), 0.7, None), ...]
    parts = parse_mixture("a.jsonl=0.7,b.csv=0.3:content")  # b.csv's text in its "content"
    batches = MixedBatches([books_batches, web_batches], [0.7, 0.3])

Each batch comes whole from one corpus (its rows, masks and epochs are that corpus' own
`PretrainingBatches`), and the corpus of each step is fixed by the proportions alone: step k
goes to the corpus furthest behind its share, the one with the largest w_i * (k + 1) - n_i
(n_i: batches it has given so far; ties to the first). Over any stretch of steps each
corpus' count is within one batch of its share, with no random draw to save; the counts n_i and
each corpus' own position are the whole state (`state_dict`), so a resumed run continues with
exactly the batches of an uninterrupted one. Every rank computes the same schedule, so under
torchrun all ranks take their rows of the same corpus' batch.

Mixing whole batches rather than rows keeps each corpus' batch shapes, masking and resume
exactly as they are alone; at 16 or more sequences a batch and a few corpora the gradient
sees every corpus within a handful of steps.

In a --config file the mixture is a table: `[data]` with `"books" = 0.7` and `"web" = 0.3`.
A corpus is a directory made by `bertkit prepare`, or text (a file, folder or glob) that
`pretrain` prepares into the run first (`run_data.mixture_parts`), all with one tokenizer.

A corpus of records (JSONL, CSV, Parquet) whose text is in another field than --text-field's
names it after its weight, `PATH=W:FIELD` (in a table, `"b.csv" = {weight = 0.3, text_field =
"content"}`). After the weight because nothing a path may hold goes there: the weight is all
that follows a path's last "=", and no number holds ":", so no spelling that names a path
today reads otherwise. A field so given holds no "," or "=" (those split the items).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from bertkit.files import UserError


class MixedCorpus(NamedTuple):
    """One corpus of a mixture as --data names it."""
    path: Path
    weight: float
    """Its share: the weights of a mixture sum to 1."""
    text_field: str | None = None
    """The field of its records that holds the text (`PATH=W:FIELD`); None: --text-field's."""


def parse_mixture(spec: str | os.PathLike) -> list[MixedCorpus] | None:
    """[(corpus, weight, text field or None)] with weights summing to 1 for
    "PATH=W,PATH=W:FIELD,...", or None when `spec` names one path (an existing one, or any
    without "=")."""
    text = str(spec)
    if "=" not in text or Path(text).exists():
        return None
    parts = [_corpus(item, text) for item in _items(text)]
    names = [p for p, _, _ in parts]
    if len(set(names)) < len(names):
        raise UserError(f"--data {text}: a corpus is named twice")
    total = sum(w for _, w, _ in parts)
    return [MixedCorpus(p, w / total, f) for p, w, f in parts]


def _corpus(item: str, text: str) -> MixedCorpus:
    """The corpus of one PATH=W[:FIELD] item of the mixture `text`, its weight as given."""
    name, eq, weight = item.rpartition("=")
    if not eq or not name or ("," in name and not Path(name).exists()
                              and not set("*?[") & set(name)):
        raise UserError(f"--data {text}: expected PATH=WEIGHT,PATH=WEIGHT (a mixture of "
                        f"corpora), got {item.partition(',')[0]!r}")
    weight, colon, field = weight.partition(":")
    if colon and not field.strip():
        raise UserError(f"--data {text}: the text field of {name} after ':' is empty")
    try:
        value = float(weight)
    except ValueError:
        raise UserError(f"--data {text}: the weight of {name} is {weight!r}, not a "
                        f"number") from None
    if not value > 0 or value == float("inf"):
        raise UserError(f"--data {text}: the weight of {name} must be positive, got "
                        f"{weight}")
    return MixedCorpus(Path(name), value, field.strip() if colon else None)


def _items(text: str) -> list[str]:
    """The PATH=WEIGHT items of a mixture, split at its commas; a path may hold commas and "="
    (its weight is after the last "="): a piece with no "=" goes on into the next, and so
    does a whole item where the path with the next piece exists ("a=1,b.txt" as a file)."""
    items: list[str] = []
    for piece in text.split(","):  # spaces kept until the end: "my, books.txt" has one
        if items:
            joined = f"{items[-1]},{piece}"
            name = joined.rpartition("=")[0].strip() if "=" in piece else ""
            if "=" not in items[-1] or (name and Path(name).exists()):
                items[-1] = joined
                continue
        items.append(piece)
    return [item.strip() for item in items]


def mixture_spec(parts: list[MixedCorpus]) -> str:
    """The --data spelling of a mixture: "PATH=W,PATH=W:FIELD"."""
    return ",".join(f"{p}={w:g}{'' if f is None else f':{f}'}" for p, w, f in parts)


def schedule(weights: list[float], taken: list[int]) -> int:
    """The corpus of the next batch: the one furthest behind its share."""
    step = sum(taken) + 1
    return max(range(len(weights)), key=lambda i: (weights[i] * step - taken[i], -i))


def allocate(total: int, weights: list[float]) -> list[int]:
    """`total` items split by the weights (the schedule's first `total` choices)."""
    taken = [0] * len(weights)
    for _ in range(total):
        taken[schedule(weights, taken)] += 1
    return taken


class MixedBatches:
    """Batches from several batch sources (each with state_dict / load_state_dict), taken in
    the proportions `weights` by `schedule`; see the module docstring."""

    def __init__(self, parts: list, weights: list[float]):
        if len(parts) != len(weights) or not parts:
            raise ValueError("one weight per part, at least one part")
        self.parts, self.weights = list(parts), list(weights)
        self.taken = [0] * len(parts)

    def set_progress(self, fraction: float) -> None:
        for part in self.parts:
            if hasattr(part, "set_progress"):
                part.set_progress(fraction)

    def __iter__(self):
        streams = [None] * len(self.parts)  # opened when first needed (prefetch threads)
        try:
            while True:
                i = schedule(self.weights, self.taken)
                if streams[i] is None:
                    streams[i] = iter(self.parts[i])
                batch = next(streams[i])
                self.taken[i] += 1
                yield batch
        finally:
            for stream in streams:
                if hasattr(stream, "close"):
                    stream.close()

    def state_dict(self) -> dict:
        return {"taken": list(self.taken), "weights": list(self.weights),
                "parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state: dict) -> None:
        weights = [float(w) for w in state["weights"]]
        if len(weights) != len(self.weights) or any(
                abs(a - b) > 1e-12 for a, b in zip(weights, self.weights)):
            raise UserError(f"the data position was saved for the mixture weights "
                            f"{weights}, this run has {self.weights}")
        self.taken = [int(n) for n in state["taken"]]
        for part, saved in zip(self.parts, state["parts"]):
            part.load_state_dict(saved)
