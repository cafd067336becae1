"""Model cards: a model directory's README.md, the page the Hugging Face hub shows for it.

A command that makes a model out of another keeps the source's card, which still tells where
the model comes from (its license, its data, its front matter of tags), and adds a section at
its end saying what the command changed (`card_with_section`). The section holds no date or
time: the same command on the same files writes the same card.
"""
from __future__ import annotations

from pathlib import Path

from bertkit.files import UserError

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


__all__ = ["CARD_FILE", "read_card", "card_with_section"]
