"""Owning a run directory: one process at a time writes into it.

    with RunLock("runs/mini"):
        ...   # prepare, train, save

The lock is the file DIR/.bertkit.lock holding the owner's pid, host and start time, created
with O_EXCL (exactly one process creates it). A second process gets one line,
"DIR is in use by pid N on HOST (started ...)". The lock of a process that no longer runs on
this host (killed with -9, the machine's power cut) is taken over with a notice; so is one of a
worker of the same torchrun job on any host (rank 0 of an earlier round of restarts). The lock is
released when the block ends, by an exception too; the CLI turns SIGTERM into an exit that
runs it. A directory the lock made is removed with it if nothing was written there. A process
that already holds the lock may take it again (nested calls). Once it holds the lock, a process
sweeps the temporaries that killed processes left in the directory and beside it
(`bertkit.temporaries.sweep_leftovers`), with a one-line notice.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sys
from pathlib import Path

from bertkit.files import UserError
from bertkit.temporaries import announce_swept, sweep_leftovers

LOCK_FILE = ".bertkit.lock"


def _earlier_round(holder: dict, me: dict) -> bool:
    """Whether the lock is another process's of the same torchrun job (TORCHELASTIC_RUN_ID,
    its --rdzv-id; not torchrun's default "none", which jobs share):
    a worker of an earlier round, since torchrun stops every worker of a round before it
    starts the next. Its host may be another node (ranks are dealt anew at each round), where
    whether it runs cannot be asked."""
    return (me["job"] not in (None, "none") and holder.get("job") == me["job"]
            and (holder.get("pid"), holder.get("host")) != (me["pid"], me["host"]))


class RunLock:
    """The lock of `directory` (made if missing) while the `with` block runs."""

    def __init__(self, directory: str | os.PathLike, enabled: bool = True):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.enabled = enabled
        self.owned = False
        self.made = False

    def __enter__(self) -> RunLock:
        if self.enabled:
            self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        if self.directory.exists() and not self.directory.is_dir():
            raise UserError(f"{self.directory}: exists and is not a directory")
        self.made = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "command": " ".join(sys.argv), "job": os.environ.get("TORCHELASTIC_RUN_ID")}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
                    return  # this process holds it already; the outer holder releases it
                if _earlier_round(holder, me):
                    print(f"note: {self.directory}: taking over the lock of pid "
                          f"{holder['pid']} on {holder.get('host')}, a worker of this torchrun "
                          f"job's earlier round", file=sys.stderr)
                elif self._stale(holder, me["host"]):
                    print(f"note: {self.directory}: taking over the lock of pid "
                          f"{holder['pid']}, which no longer runs", file=sys.stderr)
                else:
                    raise UserError(self._in_use(holder)) from None
                self.path.unlink(missing_ok=True)
                continue
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(json.dumps(me) + "\n")
            except BaseException:  # a full disk: no unreadable lock left to block the next run
                self.path.unlink(missing_ok=True)
                if self.made:
                    with contextlib.suppress(OSError):
                        self.directory.rmdir()
                raise
            self.owned = True
            announce_swept(sweep_leftovers(self.directory, recursive=True)
                           + sweep_leftovers(self.directory.parent, self.directory.name))
            return
        raise UserError(self._in_use(self._holder()))

    def release(self) -> None:
        if self.owned:
            self.owned = False
            self.path.unlink(missing_ok=True)
            if self.made:  # nothing was written into the directory the lock made: remove it
                with contextlib.suppress(OSError):
                    self.directory.rmdir()

    def _holder(self) -> dict:
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
            return holder if isinstance(holder, dict) else {}
        except (OSError, ValueError):
            return {}  # being written this instant, or not ours

    @staticmethod
    def _stale(holder: dict, host: str) -> bool:
        pid = holder.get("pid")
        if holder.get("host") != host or not isinstance(pid, int) or pid <= 0:
            return False  # another machine's process cannot be asked whether it runs
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # it runs, as another user
        return False

    def _in_use(self, holder: dict) -> str:
        if "pid" not in holder:
            return (f"{self.directory} is in use (its lock {self.path} cannot be read); delete "
                    f"the lock if no process writes there")
        return (f"{self.directory} is in use by pid {holder['pid']} on {holder.get('host')} "
                f"(started {holder.get('started')})")


__all__ = ["LOCK_FILE", "RunLock"]
