"""Inputs from anywhere: labelled data given as a path, "-" (standard input) or rows in memory
(a list of dicts or strings, a `datasets.Dataset`), staged as the one file the readers of
`bertkit.finetuning.readers` read (`input_file`), named to the user as given (`input_name`),
and known again by its bytes when a run resumes (`input_identity`).
"""
from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from bertkit.files import UserError, sha256_file
from bertkit.finetuning.readers import detect_format

STDIN = "-"


def is_source(value) -> bool:
    """Whether `value` is labelled data for `input_file` to stage: a path, "-", or rows in
    memory (a list of dicts, a datasets.Dataset or anything with `.to_list()`), as opposed to
    examples already read (TextExample, TaggedSentence, a task's own objects or strings)."""
    if isinstance(value, (str, Path)) or hasattr(value, "to_list"):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], dict)


def input_name(source) -> str | None:
    """How an input is named to the user, in messages and in what a run records: a path as
    given, "<stdin>" for "-", "<rows>" for rows in memory (never the file `input_file`
    stages them in); None stays None."""
    if source is None or not isinstance(source, (str, Path)):
        return None if source is None else "<rows>"
    return "<stdin>" if str(source) == STDIN else str(source)


def input_identity(source, file: Path | None) -> str | None:
    """What a checkpoint records of an input, by which a resumed run knows it again: its bytes
    (`file`: what `input_file` gives), named as messages name it, "train.jsonl (sha256
    1a2b3c4d5e6f7a8b)", "<stdin> (sha256 ...)". The digest is the identity: a file edited or
    replaced under its path is other data, the same bytes under another path or piped in are
    the same (standard input and rows are staged in a file named anew each run). One streamed
    pass. A path that is no file is named as given, for the readers to say what is wrong with
    it (a pipe is never read here); None stays None."""
    if file is None or not Path(file).is_file():
        return None if file is None else str(file)
    return f"{input_name(source)} (sha256 {sha256_file(file)[:16]})"


@contextlib.contextmanager
def input_file(source, stdin=None) -> Iterator[Path | None]:
    """The file the readers read for `source`, staged in a temporary directory when it is not
    one already: a path is itself; "-" is standard input (JSON lines, SQuAD JSON, CoNLL with
    tabs or CoNLL-U when its content says so, else one text a line); strings are one text a
    line; dicts are JSON lines. None stays None."""
    if source is None or (isinstance(source, (str, Path)) and str(source) != STDIN):
        yield None if source is None else Path(source)
        return
    with tempfile.TemporaryDirectory(prefix="bertkit-input-") as tmp:
        if isinstance(source, (str, Path)):  # "-"
            staged = Path(tmp) / "stdin"
            content = (stdin or sys.stdin).read()
            staged.write_text(content, encoding="utf-8")
            try:
                fmt = detect_format(staged)
            except UserError:
                fmt = "text"
            # short sentences split by spaces look like CoNLL: here CoNLL has tabs
            if fmt == "conll" and any("\t" not in line for line in content.splitlines()
                                      if line.strip() and not line.startswith("#")):
                fmt = "text"
            suffix = {"jsonl": ".jsonl", "squad": ".json", "conll": ".conll",
                      "conllu": ".conllu"}.get(fmt, ".txt")
            staged = staged.rename(staged.with_suffix(suffix))
        else:
            staged = _staged_rows(source, Path(tmp))
        try:
            yield staged
        except UserError as e:  # the input as the user gave it, not the staged file
            raise UserError(str(e).replace(str(staged), input_name(source))) from None


def _staged_rows(source, tmp: Path) -> Path:
    """Rows in memory written to `tmp` as a file the readers read."""
    rows = list(source.to_list() if hasattr(source, "to_list") else source)
    if not rows:
        raise UserError("no rows given")
    if all(isinstance(r, str) for r in rows):
        if any("\n" in r for r in rows):
            raise UserError("a text holds a line break; give texts of one line each")
        staged = tmp / "rows.txt"
        staged.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    elif all(isinstance(r, dict) for r in rows):
        staged = tmp / "rows.jsonl"
        staged.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                          encoding="utf-8")
    else:
        kinds = sorted({type(r).__name__ for r in rows})
        raise UserError(f"rows must be all strings or all dicts, got {', '.join(kinds)}")
    return staged
