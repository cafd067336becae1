"""Reading user files with errors that name the file and line, and writing outputs atomically.

Every command that fails on bad input raises `UserError`; the CLI prints its one line and exits
non-zero without a traceback. Outputs are written to a temporary sibling and renamed into place,
so an interrupted or failed run never leaves a half-written file or directory behind.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


class UserError(Exception):
    """Bad input from the user: the message is the whole story, printed on one line."""


def require_file(path: str | os.PathLike, what: str = "input file") -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: {what} does not exist")
    if p.is_dir():
        raise UserError(f"{p}: {what} is a directory, expected a file")
    if p.stat().st_size == 0:
        raise UserError(f"{p}: {what} is empty")
    return p


def read_lines(path: str | os.PathLike, what: str = "input file") -> Iterator[tuple[int, str]]:
    """Yield (line number from 1, line without its newline), streaming.

    Bytes that are not UTF-8 raise UserError naming the file and line.
    """
    p = require_file(path, what)
    with open(p, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{p}:{number}: not UTF-8 text (byte {raw[e.start]:#04x} at "
                                f"column {e.start + 1})") from None
            yield number, line.rstrip("\r\n")


def read_jsonl(path: str | os.PathLike, what: str = "input file") -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line of a JSON-lines file."""
    for number, line in read_lines(path, what):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{number}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
        yield number, obj


def read_json(path: str | os.PathLike, what: str = "JSON file", format: str | None = None):
    """The parsed file; with `format`, it must be a JSON object whose "format" is that name
    (the files bertkit writes say what they are)."""
    p = require_file(path, what)
    try:
        data = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{p}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{p}:{e.lineno}: not valid JSON ({e.msg})") from None
    if format is not None and (not isinstance(data, dict) or data.get("format") != format):
        raise UserError(f"{p}: not a {what} (no \"format\": \"{format}\")")
    return data


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; it is synced and renamed onto `path` only if the
    block succeeds (for writers that want a path, such as numpy's open_memmap)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only, unlike a plain open()
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator:
    """Open a temporary file beside `path`; rename it onto `path` only if the block succeeds."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside `path` to write into; publish it only on success.

    A new `path` appears whole (one rename). Into an existing `path` (a training run's output,
    with its checkpoints and logs) each written file is renamed over its old version, and
    files the block did not write are left alone.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: exists and is not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it owner-only; a model directory is not secret
    try:
        yield tmp
        if path.exists():
            for child in sorted(tmp.iterdir()):
                if (path / child.name).is_dir():
                    shutil.rmtree(path / child.name)
                os.replace(child, path / child.name)
            tmp.rmdir()
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj) -> None:
    with atomic_file(path) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
