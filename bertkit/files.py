"""Reading user files with errors that name the file and line, and writing outputs atomically.

Every reader opens a gzip, zstd or bzip2 file, known by its first bytes, as the text it holds
(`read_lines`, `read_json`, `open_bytes`); data cut short or corrupt is a one-line error at the
line where it stops.

Every command that fails on bad input raises `UserError`; the CLI prints its one line and exits
non-zero without a traceback. Outputs are written to a temporary sibling and renamed into place,
so an interrupted or failed run never leaves a half-written file or directory behind; an
existing directory is replaced whole (`publish_dir`), keeping the files it did not write. An
output that is one of the inputs is refused before anything is written (`check_not_input`).

The machine's refusals are user errors too (`environment_error`): a full disk, a read-only or
forbidden directory, a directory where a file is written, memory exhausted. A temporary's name
says which process made it (`.NAME.PID-HOST.XXXXXXXX.tmp`), so the leftovers of a process killed
with -9 are recognised and swept by the next run that writes the same output
(`bertkit.temporaries.sweep_leftovers`); nothing else is ever removed.
"""
from __future__ import annotations

import bz2
import codecs
import contextlib
import ctypes
import errno
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import zlib
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from bertkit.temporaries import TEMP_NAME, announce_swept, sweep_leftovers, temp_prefix


class UserError(Exception):
    """Bad input from the user: the message is the whole story, printed on one line."""


def install_extra(extra: str) -> str:
    """How to install one of bertkit's optional extras, from a package index or a checkout."""
    return f"pip install 'bertkit[{extra}]', or pip install -e '.[{extra}]' in a checkout"


# One line per extra, the same wherever bertkit asks for it.
INSTALL_PLOT = install_extra("plot")
INSTALL_ONNX = install_extra("onnx")
INSTALL_SERVE = install_extra("serve")
INSTALL_DATA = install_extra("data")


class SaidElsewhere(UserError):
    """A failure whose cause another process reports (a rank whose peer left the run, under
    bertkit-torchrun): the CLI prints no line and exits `status`, which tells the launcher; the
    message is for a library caller."""
    status = 3
    launcher = "BERTKIT_TORCHRUN"
    """Set (to 1) by bertkit-torchrun for its workers: it reports a rank whose peer left, so
    that rank raises this error rather than a UserError of its own."""
    lines = "BERTKIT_TORCHRUN_LINES"
    """A folder bertkit-torchrun makes for its workers' error lines: the ranks of a node read
    the same command line and fail alike, and the first to fail on a line says it alone."""


# The machine's refusals ----------------------------------------------------------------------

ENVIRONMENT_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EFBIG", "EACCES", "EPERM", "EROFS", "EISDIR", "ENOTDIR", "EEXIST",
    "ENOENT", "ENAMETOOLONG", "ELOOP", "EIO", "EMFILE", "ENFILE", "ENOMEM") if hasattr(errno, name))
"""OSErrors that say something about the machine or the paths given, not about bertkit."""

_REASONS = {errno.ENOSPC: "no space left on the device; free some or write elsewhere",
            errno.EROFS: "read-only file system; write elsewhere",
            errno.EACCES: "permission denied",
            errno.EPERM: "operation not permitted",
            errno.EISDIR: "is a directory, where a file is needed",
            errno.ENOTDIR: "a part of this path is a file, where a directory is needed",
            errno.EFBIG: "file too large (for the file system, or past `ulimit -f`)",
            errno.ENOMEM: "out of memory"}
if hasattr(errno, "EDQUOT"):
    _REASONS[errno.EDQUOT] = "disk quota exceeded; free some space or write elsewhere"

_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")

OUT_OF_MEMORY = ("out of memory; lower --batch-size (or --seq-len / --max-length), or use a "
                 "machine with more memory")


def out_of_memory(e: BaseException) -> bool:
    """An allocation failure: MemoryError, torch.OutOfMemoryError (accelerators), or the plain
    RuntimeError of torch's CPU allocator, whose message is the only sign."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    return isinstance(e, RuntimeError) and "can't allocate memory" in str(e)


def environment_error(e: BaseException, path: str | os.PathLike | None = None
                      ) -> UserError | None:
    """The one-line UserError for an error of the machine rather than of bertkit: an OSError in
    `ENVIRONMENT_ERRNOS`, or another library's error that reports one, such as safetensors'
    "I/O error: ... (os error 28)" (naming the file it names, else `path`; a temporary by the
    output it stands for), or memory exhausted. None for anything else (a bug: keep its
    traceback)."""
    if out_of_memory(e):
        return UserError(OUT_OF_MEMORY)
    if isinstance(e, OSError):
        code, named = e.errno, e.filename
    else:  # Rust writers (safetensors, tokenizers) report the system's error in their message
        found = _RUST_OS_ERROR.search(str(e))
        code, named = (int(found.group(1)) if found else None), None
    if code not in ENVIRONMENT_ERRNOS:
        return None
    named = named if named is not None else path
    reason = _REASONS.get(code) or os.strerror(code)
    if named is None:
        return UserError(reason)
    return UserError(f"{public_name(named)}: {reason}")


def public_name(path: str | os.PathLike | bytes) -> Path:
    """`path` with each bertkit temporary in it replaced by the output it becomes."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)

    def public(part: str) -> str:
        while m := TEMP_NAME.fullmatch(part):  # a temporary of a temporary: a nested atomic_dir
            part = m["name"]
        return part

    parts = [public(part) for part in Path(path).parts]
    return Path(*parts) if parts else Path(path)


def _make_parent(path: Path) -> None:
    """Create `path`'s parent directories; a file in the way is a one-line UserError."""
    for ancestor in reversed(path.parents):
        if ancestor.exists() and not ancestor.is_dir():
            raise UserError(f"{ancestor}: is a file, where a directory is needed (for {path})")
    path.parent.mkdir(parents=True, exist_ok=True)


def require_file(path: str | os.PathLike, what: str = "input file") -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: {what} does not exist")
    if p.is_dir():
        raise UserError(f"{p}: {what} is a directory, expected a file")
    if p.stat().st_size == 0:
        raise UserError(f"{p}: {what} is empty")
    return p


# Compressed input: every reader opens a gzip, zstd or bzip2 file as the text it holds ----------

COMPRESSIONS = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bzip2"))
"""(first bytes, name) of the compressed formats, recognised by content under any name."""
COMPRESSED_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd",
                       ".bz2": "bzip2"}


def format_suffix(path: str | os.PathLike) -> str:
    """The lower-case extension that names a file's format, before a compression suffix:
    ".jsonl" for data.jsonl.gz, "" for none."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COMPRESSED_SUFFIXES:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def compression_of(path: Path) -> str | None:
    """"gzip", "zstd" or "bzip2" by the file's first bytes; None for anything else."""
    with open(path, "rb") as f:
        head = f.read(4)
    return next((name for magic, name in COMPRESSIONS if head.startswith(magic)), None)


def need_package(module: str, path: str | os.PathLike, what: str):
    """The optional `module` (of the `data` extra), or a one-line error naming the file."""
    try:
        return __import__(module)
    except ImportError:
        raise UserError(f"{path}: reading {what} needs the {module} package: "
                        f"{INSTALL_DATA}") from None


def open_bytes(path: Path, compression: str | None) -> BinaryIO:
    """The file's bytes, decompressed (`compression_of`)."""
    if compression is None:
        return open(path, "rb")
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    return io.BufferedReader(_ZstdFrames(path, need_package("zstandard", path, "zstd data")),
                             1 << 20)


class _ZstdFrames(io.RawIOBase):
    """zstd frames back to back, decompressed. A file that ends inside a frame raises
    ZstdError, where python-zstandard's stream reader ends there without a word."""

    def __init__(self, path: Path, zstandard):
        self.file, self.zstandard = open(path, "rb"), zstandard
        self.frame = zstandard.ZstdDecompressor().decompressobj()
        self.started, self.out, self.at = False, b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self.at == len(self.out):
            data = self.file.read(1 << 20)
            if not data:
                if self.started:
                    raise self.zstandard.ZstdError("the file ends inside a frame")
                return 0
            self.out, self.at = b"", 0
            self._feed(data)
        n = min(len(buffer), len(self.out) - self.at)
        buffer[:n] = self.out[self.at:self.at + n]
        self.at += n
        return n

    def _feed(self, data: bytes) -> None:
        while data:
            self.started = True
            self.out += self.frame.decompress(data)
            if not self.frame.eof:
                return
            data = self.frame.unused_data  # the next frame begins here
            self.frame = self.zstandard.ZstdDecompressor().decompressobj()
            self.started = False

    def close(self) -> None:
        self.file.close()
        super().close()


def corrupt_data_errors(path: Path, compression: str | None) -> tuple[type[BaseException], ...]:
    """What a decompressor raises on bad data (none for a plain file: its OSError is the
    machine's, reported as such)."""
    if compression is None:
        return ()
    errors: tuple = (OSError, EOFError, zlib.error, ValueError)
    if compression == "zstd":
        errors += (need_package("zstandard", path, "zstd data").ZstdError,)
    return errors


def first_line_of(e: BaseException) -> str:
    """An exception's message in one line (its type when it has none)."""
    return (str(e).splitlines() or [""])[0] or type(e).__name__


def decode_line(raw: bytes, path: str | os.PathLike, number: int) -> str:
    """Line `number` of `path` as UTF-8 text, or a one-line error naming the byte. Line 1 loses
    the byte order mark that Windows tools write first (it is no text, and breaks JSON)."""
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as e:
        if number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff") and b"\0" in raw[2:6]:
            # UTF-16's byte order mark, then the zero byte of an ASCII character
            raise UserError(f"{path}:1: UTF-16 text, not UTF-8: convert it (iconv -f UTF-16 -t "
                            f"UTF-8)") from None
        raise UserError(f"{path}:{number}: not UTF-8 text (byte {e.object[e.start]:#04x} at "
                        f"column {e.start + 1}){_windows_1252(e.object[e.start])}") from None


def _windows_1252(byte: int) -> str:
    """A hint where the byte that is not UTF-8 is a letter or typographic mark of Windows-1252,
    what Excel saves a CSV in on Western Windows ("é" as 0xe9); not 0xff ("ÿ"), the byte of
    binary data far more often."""
    try:
        char = bytes([byte]).decode("cp1252")
    except UnicodeDecodeError:
        return ""
    if not (char.isalpha() and byte != 0xff or char in "‘’“”–—€…"):
        return ""
    return (f": {char!r} in Windows-1252, as Excel saves a CSV? iconv -f cp1252 -t utf-8 "
            f"converts it")



def read_lines(path: str | os.PathLike, what: str = "input file") -> Iterator[tuple[int, str]]:
    """Yield (line number from 1, line without its newline), streaming; a compressed file
    (gzip, zstd, bzip2) as the lines it holds.

    Bytes that are not UTF-8, or corrupt compressed data, raise UserError naming the file and
    line.
    """
    p = require_file(path, what)
    compression = compression_of(p)
    number = 0
    with open_bytes(p, compression) as f:
        try:
            for number, raw in enumerate(f, 1):
                yield number, decode_line(raw, p, number).rstrip("\r\n")
        except corrupt_data_errors(p, compression) as e:
            raise UserError(f"{p}:{number + 1}: corrupt {compression} data "
                            f"({first_line_of(e)})") from None


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
    compression = compression_of(p)
    try:
        with open_bytes(p, compression) as f:
            raw = f.read().removeprefix(codecs.BOM_UTF8)
    except corrupt_data_errors(p, compression) as e:
        raise UserError(f"{p}: corrupt {compression} data ({first_line_of(e)})") from None
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
    block succeeds (for writers that want a path, such as numpy's open_memmap). On any error
    the temporary is removed; an error of the machine (disk full, read-only, ...) becomes a
    one-line UserError naming the file."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory, where a file is needed; name a file")
    try:
        _make_parent(path)
        announce_swept(sweep_leftovers(path.parent, path.name))
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path.name), suffix=".tmp",
                                   dir=path.parent)
    except OSError as e:
        raise environment_error(e, path) or e from None
    try:
        os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only, unlike a plain open()
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if (error := environment_error(e, path)) is not None:
            raise error from None
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
    Its files the block did not write are kept, except those named in `replaces`. On any
    error the temporary directory is removed; an error of the machine becomes a UserError.
    """
    path = Path(path)
    if path.is_symlink():  # replace the directory it names, not the link
        path = path.resolve()
    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: exists and is not a directory")
    try:
        _make_parent(path)
        announce_swept(sweep_leftovers(path.parent, path.name))
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(path.name), suffix=".tmp",
                                    dir=path.parent))
        umask = _umask()
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it owner-only; a model directory is not secret
    except OSError as e:
        raise environment_error(e, path) or e from None
    try:
        yield tmp
        _follow_umask(tmp, umask)
        publish_dir(tmp, path, replaces)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if (error := environment_error(e, path)) is not None:
            raise error from None
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
    old = Path(tempfile.mkdtemp(prefix=temp_prefix(path.name), suffix=".old", dir=path.parent))
    os.rename(path, old / "dir")
    try:
        os.rename(new, path)
    except BaseException:
        os.rename(old / "dir", path)  # the old directory back where it was
        old.rmdir()
        raise
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
    """Ready the finished `directory` to be published.

    Its owner-only files get the mode a plain open() gives: writers that go through a
    temporary file of their own (safetensors' save_file, mkstemp) leave them 0600, while the
    JSON beside them follows the umask. A file linked from elsewhere (more than one link) is
    not ours to change. Every file and folder is flushed to the disk (fsync) first, as
    `atomic_path` does for one file, so that a power cut after the swap cannot leave the new
    directory with empty files."""
    for root, dirs, names in os.walk(directory):
        for name in names:
            file = os.path.join(root, name)
            st = os.lstat(file)
            if not stat.S_ISREG(st.st_mode):
                continue
            if stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 1:
                os.chmod(file, 0o666 & ~umask)
            if st.st_nlink == 1:  # a hard link from the old directory is already on the disk
                with open(file, "rb") as f:
                    os.fsync(f.fileno())
        _fsync_dir(root)


def _fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (the names of the files in it) to the disk, where the system
    allows opening a folder for that."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_json(path: str | os.PathLike, obj) -> None:
    with atomic_file(path) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
