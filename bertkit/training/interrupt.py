"""Ctrl-C and SIGTERM during a run: the flag the loop checks after each step, and what it
promises on stderr (`StopSignal`).
"""
from __future__ import annotations

import signal
import sys
import threading
from typing import Callable

from bertkit import signals


class StopSignal:
    """Ctrl-C / SIGTERM set a flag the loop checks after each step; a second Ctrl-C aborts.
    `last_checkpoint` (a rank of several): the step of the latest checkpoint, said beside a
    save that needs every rank (torchrun's SIGTERM after a peer's kill -9 reaches a rank that
    cannot save; under bertkit-torchrun it then ends silent, SaidElsewhere)."""

    def __init__(self, announce: bool, last_checkpoint: Callable[[], int] | None = None):
        self.signum: int | None = None
        self.announce = announce
        self.last_checkpoint = last_checkpoint
        self.previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                # watched: a rank stuck in a collective whose peer died exits all the same
                self.previous[sig] = signals.handle(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signals.restore(sig, handler)

    def _handle(self, signum, frame):
        # a second Ctrl-C aborts; so does any signal after one: torchrun passes its launcher's
        # second Ctrl-C on as SIGTERM (two SIGTERMs, the launcher's and the scheduler's, do not)
        if self.signum is not None and signal.SIGINT in (signum, self.signum):
            raise KeyboardInterrupt
        self.signum = signum
        if self.announce:
            print(f"\n{signal.Signals(signum).name}: {self._promise()}", file=sys.stderr,
                  flush=True)

    def _promise(self) -> str:
        if self.last_checkpoint is None:
            return "finishing this step and saving a checkpoint (Ctrl-C again to abort)"
        step = self.last_checkpoint()
        latest = f"the latest stays step {step}'s" if step >= 0 else "there is none yet"
        return (f"finishing this step, then saving a checkpoint if no rank has left the run "
                f"(else {latest}; Ctrl-C again to abort)")
