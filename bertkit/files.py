"""Reading user files with errors that name the file and line, and writing outputs atomically.

Every command that fails on bad input raises `UserError`; the CLI prints its one line and exits
non-zero without a traceback. Outputs are written to a temporary sibling and renamed into place,
so an interrupted or failed run never leaves a half-written file or directory behind; an
existing directory is replaced whole (`publish_dir`), keeping the files it did not write. An
output that is one of the inputs is refused before anything is written (`check_not_input`).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator


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
    raw = p.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise UserError(f"{p}:{line}: not UTF-8 text (byte {raw[e.start]:#04x})") from None
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
def atomic_dir(path: str | os.PathLike, replaces: Iterable[str] = ()) -> Iterator[Path]:
    """Yield a temporary directory beside `path` to write into; publish it only on success.

    A new `path` appears whole (one rename). An existing `path` (a model directory, a training
    run's output with its checkpoints and logs) is replaced whole as well: see `publish_dir`.
    Its files the block did not write are kept, except those named in `replaces`.
    """
    path = Path(path)
    if path.is_symlink():  # replace the directory it names, not the link
        path = path.resolve()
    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: exists and is not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    umask = _umask()
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it owner-only; a model directory is not secret
    try:
        yield tmp
        _follow_umask(tmp, umask)
        publish_dir(tmp, path, replaces)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_dir(new: str | os.PathLike, path: str | os.PathLike,
                replaces: Iterable[str] = ()) -> None:
    """Move the finished directory `new` to `path` so that `path` is at every instant either
    the old directory or the new one, complete.

    Into an existing `path`: every entry of the old directory that `new` lacks is carried over
    (hard links, cheap and on the same file system; a copy where links are refused), except
    the relative paths in `replaces` (files, or directories with all they hold) that the
    caller listed as its own from an earlier run; then the two directories are swapped in one
    rename (Linux renameat2 RENAME_EXCHANGE) and the old one is deleted. Where the system has
    no exchange, two renames leave `path` missing for an instant, the old directory complete
    beside it as `.NAME.*.old`."""
    new, path = Path(new), Path(path)
    if not path.exists():
        os.rename(new, path)
        return
    _carry_over(path, new, path, {Path(r).as_posix() for r in replaces})
    if _exchange(new, path):
        shutil.rmtree(new, ignore_errors=True)  # the old directory now has the new one's name
        return
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
    os.rename(path, old / "dir")
    os.rename(new, path)
    shutil.rmtree(old, ignore_errors=True)


def _carry_over(source: Path, target: Path, root: Path, replaces: set[str]) -> None:
    for entry in os.scandir(source):
        rel = Path(entry.path).relative_to(root).as_posix()
        there = target / entry.name
        if rel in replaces or (there.exists() and not there.is_dir()) or there.is_symlink():
            continue  # the new directory's version, or a file the caller owns, wins
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), there)
        elif entry.is_dir() and os.path.ismount(entry.path):
            raise UserError(f"{entry.path}: a mount point inside the output directory {root}; "
                            f"choose another output")
        elif entry.is_dir():
            there.mkdir(exist_ok=True)
            _carry_over(Path(entry.path), there, root, replaces)
        else:
            try:
                os.link(entry.path, there)
            except OSError:
                shutil.copy2(entry.path, there)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        rename = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError, TypeError):  # not Linux, or a C library without it
        return False
    at_fdcwd, rename_exchange = -100, 2
    if rename(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def check_not_input(out: str | os.PathLike | None, inputs: list, what: str = "output",
                    names: list[str] | None = None) -> None:
    """UserError when the output `out` would clobber an input: it is the same file or directory
    as one of `inputs` (by inode, however it is spelled), or an existing directory that holds
    one. `names` (the inputs' flags) and `what` (the output's) make the message."""
    if out is None:
        return
    out = Path(out)
    if not out.exists():
        return
    named = [(name, Path(p)) for name, p in zip(
        names if names is not None else ["input"] * len(inputs), inputs) if p is not None]
    named = [(name, p) for name, p in named if p.exists()]
    for name, source in named:
        if os.path.samefile(out, source):
            raise UserError(f"{out}: {what} is the {name} {source}: it would be overwritten; "
                            f"choose another {what}")
    for name, source in named:
        if out.is_dir() and out.resolve() in source.resolve().parents:
            raise UserError(f"{out}: {what} directory holds the {name} {source}; choose "
                            f"another {what}")


def _umask() -> int:
    """The process' umask, read where the system shows it (Linux), else set and put back at
    once (os.umask is the only portable reader, and it writes)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _follow_umask(directory: Path, umask: int) -> None:
    """Give the owner-only files written into `directory` the mode a plain open() gives:
    writers that go through a temporary file of their own (safetensors' save_file, mkstemp)
    leave them 0600, while the JSON beside them follows the umask. A file linked from
    elsewhere (more than one link) is not ours to change."""
    for root, _, names in os.walk(directory):
        for name in names:
            file = os.path.join(root, name)
            st = os.lstat(file)
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 \
                    and st.st_nlink == 1:
                os.chmod(file, 0o666 & ~umask)


def write_json(path: str | os.PathLike, obj) -> None:
    with atomic_file(path) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
