"""Ctrl-C and SIGTERM handled in Python, and still obeyed while the main thread waits in
native code.

Python runs a signal's handler in the main thread, between two bytecodes. A main thread that
waits inside one native call (a gloo or NCCL collective whose peer died, a TCPStore barrier
of `init_process_group`, a rendezvous) runs no bytecode until the call returns, which can be
half an hour: until then a SIGTERM sent to it does nothing, and only `kill -9` stops it (what
issue 43 saw of torchrun's restarted workers). So every handler installed through `handle()`
is watched: a thread learns of each signal the moment it arrives (`signal.set_wakeup_fd`);
when the handler has not run within its grace (`GRACE`, 10 s), the main thread is stuck and the process
exits at once with 128 + the signal's number, as the signal's default action would (the run's
lock is then taken over and its temporaries swept by the next run, as after `kill -9`). A
handler that runs in time decides alone (the training loop's: finish the step, checkpoint).
So a rank that waits for rank 0 alone (its evaluation, its save) waits in Python (`wait`).

Signal dispositions belong to the whole process; so does this watch (one thread, started by
the first `handle()` in the main thread, and only while the wakeup descriptor is free: an
asyncio loop that holds it keeps its own).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from typing import Callable

GRACE = 10.0
"""Seconds a handled signal may wait for the main thread before the process exits: longer than
one native call that releases the interpreter (a large matmul, an fsync) takes, shorter than
the 30 s torchrun and Slurm give a process between SIGTERM and SIGKILL."""

Handler = Callable[[int, object], object]


class _Watched:
    """A handler that counts its runs, for the watch to compare with the signals that came."""

    def __init__(self, handler: Handler, grace: float):
        self.handler, self.grace = handler, grace

    def __call__(self, signum, frame):
        _WATCH.taken[signum] = _WATCH.taken.get(signum, 0) + 1
        return self.handler(signum, frame)


class _Watch:
    def __init__(self):
        self.arrived: dict[int, int] = {}
        self.taken: dict[int, int] = {}
        self.started = False
        self.fork_hook = False

    def start(self) -> None:
        """The thread and the wakeup descriptor, once per process (main thread only)."""
        if self.started:
            return
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread after all
            reader.close(), writer.close()
            return
        if previous != -1:  # someone else's (an event loop): give it back, no watch
            signal.set_wakeup_fd(previous)
            reader.close(), writer.close()
            return
        self.started, self._sockets = True, (reader, writer)
        threading.Thread(target=self._run, args=(reader,), name="bertkit-signals",
                         daemon=True).start()
        if not self.fork_hook:
            # A forked child (a multiprocessing worker) inherits the descriptor but not the
            # thread: its signals (Pool.terminate's SIGTERM) would reach the parent's watch,
            # which would then wait for a handler that never runs in the parent, and end it.
            os.register_at_fork(after_in_child=self._forget)
            self.fork_hook = True

    def _forget(self) -> None:
        """In a forked child: no watch, the wakeup descriptor given up."""
        if self.started:
            self.started = False
            with contextlib.suppress(ValueError, OSError):
                signal.set_wakeup_fd(-1)
            for sock in self._sockets:
                sock.close()
            self.arrived, self.taken = {}, {}

    def _run(self, reader: socket.socket) -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                handler = signal.getsignal(signum)
                if isinstance(handler, _Watched):
                    self.arrived[signum] = self.arrived.get(signum, 0) + 1
                    threading.Thread(target=self._expect, daemon=True,
                                     args=(signum, self.arrived[signum], handler.grace)).start()

    def _expect(self, signum: int, count: int, grace: float) -> None:
        """Exit unless the handler has run `count` times within `grace` seconds."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self.taken.get(signum, 0) >= count:
                return
            time.sleep(0.05)
        if self.taken.get(signum, 0) >= count or not isinstance(signal.getsignal(signum),
                                                                  _Watched):
            return
        name = signal.Signals(signum).name
        try:
            print(f"{name}: the main thread is waiting in native code (a collective or a "
                  f"rendezvous whose peer is gone): exiting now", file=sys.stderr, flush=True)
        finally:
            os._exit(128 + signum)


_WATCH = _Watch()


def handle(signum: int, handler: Handler, grace: float = GRACE):
    """Install `handler` for `signum`, watched (see the module docstring): the process exits
    when a `signum` is not handled within `grace` seconds. Returns the handler it replaces,
    to give back with `restore`. Main thread only, as `signal.signal`."""
    previous = signal.signal(signum, _Watched(handler, grace))
    _WATCH.start()
    return previous


def wait(work) -> None:
    """Wait for an asynchronous collective (`dist.barrier(async_op=True)`) in Python, a few
    times a second, so that a signal's handler runs meanwhile. A rank that waits for rank 0's
    work alone (preparing the data, evaluating, saving) is not stuck: blocked in native code
    it would be taken for stuck by the watch and end without its checkpoint. The collective's
    own timeout (--dist-timeout) still bounds the wait: `work` then completes with its error,
    which `wait` raises."""
    while not work.is_completed():
        time.sleep(0.05)
    work.wait()


def end_with_parent(signum: int = signal.SIGTERM) -> None:
    """Have the kernel send `signum` to this process when its parent ends (Linux; elsewhere
    nothing). torchrun starts its workers in sessions of their own: a launcher killed with -9
    (the OOM killer) left them training, holding the run's lock, beyond the reach of Ctrl-C.
    With SIGTERM they save a checkpoint and stop, as when the launcher stops them. Only for a
    parent that forked from its main thread (torchrun's agent): the signal comes when the
    forking thread ends."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signum), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before the call
        os.kill(os.getpid(), signum)


def restore(signum: int, previous) -> None:
    """Give back the handler `handle` replaced."""
    signal.signal(signum, previous)


__all__ = ["GRACE", "end_with_parent", "handle", "restore", "wait"]
