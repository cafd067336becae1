"""Model cards: a model directory's README.md, the page the Hugging Face hub shows for it.

A command that makes a model out of another keeps the source's card, which still tells where
the model comes from (its license, its data, its front matter of tags), and adds a section at
its end saying what the command changed (`card_with_section`). The section holds no date or
time: the same command on the same files writes the same card. A command that makes another
kind of model (a classifier out of a sentence encoder) also sets the front matter's fields the
hub reads it by (`with_front_matter`: library_name, pipeline_tag, base_model), which the
source's would otherwise state wrongly.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from bertkit.files import UserError, atomic_file

CARD_FILE = "README.md"


def read_card(model_dir: str | Path) -> str | None:
    """The model card of `model_dir`, or None where it has none. A card that is no UTF-8 text
    is a UserError: copied over, it would be garbled on the new model's page."""
    path = Path(model_dir) / CARD_FILE
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: the model card is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UserError(f"{path}: unreadable model card ({e.strerror})") from None


def card_with_section(card: str | None, title: str, body: str) -> str:
    """`card` (None: a model that had none) with the section `## title`, `body`, at its end."""
    head = card.rstrip() + "\n\n" if card and card.strip() else ""
    return f"{head}## {title}\n\n{body.strip()}\n"


_FENCE = "---"
_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


def with_front_matter(card: str | None, fields: dict[str, str | None]) -> str:
    """`card` with its YAML front matter's top-level `fields` set (None: removed), each with
    what it held (a list's lines too); a front matter made for a card without one. The rest
    of the front matter stays as written. Values are written as JSON strings, which YAML reads
    as they are."""
    text = card or ""
    lines = text.splitlines()
    if lines and lines[0].strip() == _FENCE and _FENCE in (x.strip() for x in lines[1:]):
        end = 1 + [x.strip() for x in lines[1:]].index(_FENCE)
        head = lines[1:end]
        body = "\n".join(lines[end + 1:]) + ("\n" if text.endswith("\n") else "")
    else:
        head, body = [], text
    kept, skipping = [], False
    for line in head:
        key = _KEY.match(line)
        if key:
            skipping = key.group(1) in fields
        if not skipping:
            kept.append(line)
    kept += [f"{k}: {json.dumps(v)}" for k, v in fields.items() if v is not None]
    rest = "\n" + body.lstrip("\n") if body.strip() else ""
    return "\n".join([_FENCE, *kept, _FENCE, ""]) + rest


def card_figure(name: str, value) -> str | None:
    """A figure as a card's table shows it: 4 decimals, a count (an int, or a float of
    tokens) whole; None for what is no number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return str(value)
    return f"{value:,.0f}" if name.endswith("_tokens") else f"{value:.4f}"


def write_card(model_dir: str | Path, source_card: str | None, title: str, section: str,
               front_matter: dict[str, str | None]) -> None:
    """The card of a model a command made, as README.md in `model_dir`: the card of the model
    it was made from (`source_card`, None: none) with the section `## title` on what the
    command did, and the front matter's `fields` the hub files the new model by
    (`with_front_matter`). Pretraining and fine-tuning write theirs here."""
    with atomic_file(Path(model_dir) / CARD_FILE) as f:
        f.write(with_front_matter(card_with_section(source_card, title, section), front_matter))


__all__ = ["CARD_FILE", "read_card", "card_with_section", "with_front_matter", "card_figure",
           "write_card"]
