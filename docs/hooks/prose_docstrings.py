"""A griffe extension for the API reference: bertkit's docstrings are prose, not Markdown
references, so their square brackets ("[MASK]", "[CLS] [SEP]", a shape "[B, T]") are escaped
outside code spans before mkdocstrings renders them. Otherwise Markdown reads "[CLS] [SEP]" as a
reference link to an object named "SEP" and the strict build fails on a docstring that is right.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

_CODE = re.compile(r"(`+).*?\1", re.S)


def escape_brackets(text: str) -> str:
    """`text` with every [ and ] outside backtick code spans escaped for Markdown."""
    out, last = [], 0
    for span in _CODE.finditer(text):
        out += [_escape(text[last:span.start()]), span.group()]
        last = span.end()
    return "".join(out + [_escape(text[last:])])


def _escape(prose: str) -> str:
    return re.sub(r"(?<!\\)([\[\]])", r"\\\1", prose)


class ProseDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = escape_brackets(obj.docstring.value)
