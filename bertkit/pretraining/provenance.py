"""Corpus provenance: what a prepared data directory was made from, and whether it is done.

`prepare_text` and `prepare_corpora` (`bertkit.pretraining.corpus`) record beside prepare's
own files the request a directory was made for (SOURCE_FILE: the files by path, size and
modification time, their sha256, the text field and the tokenizer asked for), so that a later
call asking the same finds it done (`found_done`), and one asking for other text is told what
differs (`refused`). `already_prepared` is the one test that a directory holds a finished
preparation of a plan; `check_tokenizer` refuses a tokenizer other than the data's.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

from bertkit.files import UserError, read_json, sha256_file, write_json
from bertkit.pretraining.shards import load_manifest
from bertkit.text.sources import Source
from bertkit.text.tokenizer import Tokenizer, tokenizer_fingerprint


SOURCE_FILE = "source.json"
"""What `prepare_text` made the directory from (the file and the tokenizer asked for), beside
prepare's own files: a later call that asks the same finds it done."""
OTHER_DATA = "data was prepared from other text or with another tokenizer"
"""What a resumed run's data directory that other text would replace is refused for."""


def source_request(sources: list[Source], text_field: str | list[str], tokenizer: dict) -> dict:
    """What a directory is asked to be made from (SOURCE_FILE): the files (path, size,
    modification time), the text field (a shared vocabulary's: of each corpus, where they
    differ; `field_read`) and the tokenizer asked for."""
    files = [{"path": str(s.path.resolve()), "bytes": s.path.stat().st_size,
              "mtime_ns": s.path.stat().st_mtime_ns} for s in sources]
    if isinstance(text_field, str):
        text_field = field_read(sources, text_field)
    return {**({"file": files[0]} if len(files) == 1 else {"files": files}),
            **({"text_field": text_field} if text_field != "text" else {}),
            "tokenizer": tokenizer}


def field_read(sources: list[Source], text_field: str) -> str:
    """The text field these sources are read by: `text_field` where one is a record (JSONL,
    CSV, a table), else the default "text" (plain text is read line by line, whatever the
    field): another field on plain text asks for the same data, as prepare's plan says."""
    return text_field if any(s.records for s in sources) else "text"


def found_done(out: Path, marker: str, request: dict, sources: list[Source],
               given: str | list[str] = "text") -> bool:
    """Whether `out` (finished: its file `marker` is there) was made as `request` asks, from
    these files or the same bytes touched, copied or moved (by sha256; then SOURCE_FILE is
    brought up to date, so that the next call knows at once). `given`: the text field as
    given, which SOURCE_FILE recorded for plain text too before `field_read`: such a record
    is found made as asked."""
    saved = read_or_none(out / SOURCE_FILE)
    digests = saved.pop("sha256", None) if isinstance(saved, dict) else None
    spelled = {k: v for k, v in request.items() if k != "text_field"}
    asked = [request, {**spelled, **({"text_field": given} if given != "text" else {})}]
    sums = functools.cache(lambda: [sha256_file(s.path) for s in sources])
    if not (out / marker).is_file() or not any(saved == a or (
            digests is not None and _sizes(saved) == _sizes(a) and digests == sums())
            for a in asked):
        return False
    if saved != request:
        write_json(out / SOURCE_FILE, {**request, "sha256": digests})
    return True


class OtherText(UserError):
    """A resumed run's data that the text given now would replace: refused (`keep`)."""


def refused(out: Path, sources: list[Source], what: str, request: dict) -> OtherText:
    """A resumed run's data that the text given now (`request`) would replace."""
    return OtherText(f"{out}: this run's {what} than it is given now "
                     f"({_what_differs(out, sources, request)}); resume with the --data it "
                     f"started with, or start a new run in another --out")


def _what_differs(out: Path, sources: list[Source], request: dict) -> str:
    """Which of the files given differs from those `out` was made from (SOURCE_FILE), in
    words: the text field asked (one, or a mixture's corpora's), or the one file changed among
    many, not the first of them."""
    saved = read_or_none(out / SOURCE_FILE)
    saved = saved if isinstance(saved, dict) else {}
    field, then = request.get("text_field", "text"), saved.get("text_field", "text")
    if saved and field != then:
        return f"text field {field!r} now, {then!r} when it was made"
    files, digests = saved.get("files", [saved.get("file")]), saved.get("sha256") or []
    if saved and len(files) != len(sources):
        return f"{len(sources)} file(s), {len(files)} when it was made"
    for i, (source, then) in enumerate(zip(sources, files if saved else [])):
        stat = source.path.stat()
        if isinstance(then, dict) and then.get("path") == str(source.path.resolve()) and (
                then.get("bytes"), then.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns):
            continue
        digest = sha256_file(source.path)
        if i < len(digests) and digests[i] == digest:
            continue
        if digest in digests:
            return (f"{source.path}: file {digests.index(digest) + 1} when it was made, "
                    f"{i + 1} now: the same text in another order")
        return f"{source.path}: not the bytes it was made from"
    return f"{sources[0].path}{' ...' if len(sources) > 1 else ''}"


def _sizes(request: dict) -> dict:
    """A `prepare_text` request with only the sizes of its files, not their paths and times:
    what it shares with the same bytes touched, copied or moved."""
    files = request.get("files", [request.get("file")])
    return {**{k: v for k, v in request.items() if k not in ("file", "files")},
            "bytes": [f.get("bytes") if isinstance(f, dict) else None for f in files]}


def read_or_none(path: Path):
    """A file a run wrote, or None when it cannot be read: a plan that cannot be read is not
    this plan, and the directory starts afresh."""
    try:
        return read_json(path)
    except UserError:
        return None


def check_tokenizer(data_dir: str | os.PathLike, tokenizer) -> None:
    """Refuse a tokenizer (or a model directory's tokenizer) other than the data's."""
    if isinstance(tokenizer, (str, os.PathLike)):
        source, tokenizer = str(tokenizer), Tokenizer.load(tokenizer)
    else:
        source = "the tokenizer"
    manifest = load_manifest(data_dir)
    if tokenizer_fingerprint(tokenizer) != manifest["tokenizer"]["fingerprint"]:
        raise UserError(f"{source}: tokenizer does not match the data in {data_dir} (vocabulary "
                        f"of {tokenizer.vocab_size} vs {manifest['tokenizer']['vocab_size']} "
                        f"pieces, or other pieces): prepare the corpus with this tokenizer")


def already_prepared(out: Path, plan: dict) -> bool:
    """Whether `out` holds a finished preparation of `plan`: its plan.json is this plan and
    its manifest, written last, is there. The one test that nothing is left to prepare."""
    return read_or_none(out / "plan.json") == plan and (out / "manifest.json").is_file()
