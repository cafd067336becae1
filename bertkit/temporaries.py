"""Temporaries named by the process that made them, and the leftovers of killed processes.

A temporary's name says which process made it (`.NAME.PID-HOST.XXXXXXXX.tmp`, or `.old` for an
output being replaced; `temp_prefix`, `TEMP_NAME`), so the leftovers of a process killed with -9
are recognised and swept by the next run that writes the same output (`sweep_leftovers`);
nothing else is ever removed. `bertkit.files` writes its outputs through such temporaries.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import sys
from pathlib import Path

_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)-(?P<host>[0-9a-f]{6})\.[A-Za-z0-9_]+"
                   r"\.(?P<kind>tmp|old)")


def temp_prefix(name: str) -> str:
    return f".{name}.{os.getpid()}-{_HOST}."


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # it runs, as another user (or cannot be asked): not ours to sweep
    return True


def temp_in_use(name: str) -> bool:
    """Whether `name` is a temporary of a process that may still run: one of this host's that
    runs, or any other host's. False for a name without its maker (a killed process's, from
    versions that did not name it), and for one whose process is gone."""
    m = TEMP_NAME.fullmatch(name)
    return m is not None and (m["host"] != _HOST or _alive(int(m["pid"])))


def sweep_leftovers(directory: str | os.PathLike, name: str | None = None,
                    recursive: bool = False) -> list[Path]:
    """Remove the temporaries in `directory` (of the output `name`, or all; with `recursive`,
    in its subdirectories too) that a process on this host made and that no longer runs:
    what a kill -9 leaves. Returns them (`announce_swept` says so in one line). Only names
    bertkit gives its temporaries are considered, and never one whose process still runs."""
    directory = Path(directory)
    swept: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return swept
    for entry in entries:
        m = TEMP_NAME.fullmatch(entry.name)
        if m and (name is None or m["name"] == name) and not temp_in_use(entry.name):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
            swept.append(Path(entry.path))
        elif recursive and not m and entry.is_dir(follow_symlinks=False):
            swept += sweep_leftovers(entry.path, None, recursive=True)
    return swept


def announce_swept(swept: list[Path]) -> None:
    """One line on stderr naming what `sweep_leftovers` removed (nothing when it was none)."""
    if swept:
        shown = ", ".join(str(p) for p in swept[:3]) + (f" and {len(swept) - 3} more"
                                                          if len(swept) > 3 else "")
        print(f"note: removed {len(swept)} leftover temporar{'y' if len(swept) == 1 else 'ies'} "
              f"of killed bertkit runs: {shown}", file=sys.stderr)
